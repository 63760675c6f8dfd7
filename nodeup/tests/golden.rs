//! Golden files: for each `tests/data/<case>/spec.yaml` (a NodeSpec), the rendered tree equals
//! `tests/data/<case>/expected/` byte for byte, and `files.txt`, `services.txt` and `certs.txt` list every
//! file's mode and owner, every service's command line and triggers, and every certificate the node would
//! issue (certificates themselves are random: their names and issuers are checked in `certificates.rs`).
//! `BALLAST_BLESS=1 cargo test -p nodeup --test golden` rewrites the expected files.
//!
//! Also here: every rendered file parses back into its type (static pods as k8s-openapi Pods,
//! KubeletConfiguration, EncryptionConfiguration, kubeconfigs), and every systemd unit passes
//! `systemd-analyze verify` with nothing on stderr.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast_state::node::NodeSpec;
use ballast_state::pki::EncryptionKeys;
use nodeup::render::types::{EncryptionConfiguration, Kubeconfig, KubeletConfiguration};
use nodeup::render::{self, ApiServerSecrets, ControlPlaneSecrets, NodeFacts, Rendered, Secrets};

const CASES: [&str; 16] = [
    "control-plane",
    "api-server",
    "control-plane-1.34",
    "worker-1.34",
    "control-plane-irsa",
    "control-plane-ssh",
    "worker-ssh",
    "control-plane-encryption-off",
    "worker",
    "worker-custom-kubelet",
    "control-plane-rotation-add",
    "control-plane-rotation-promote",
    "control-plane-rotation-drop",
    "worker-rotation-add",
    "worker-rotation-promote",
    "worker-rotation-drop",
];

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn secret(name: &str) -> String {
    std::fs::read_to_string(data().join("secrets").join(name)).expect("a test secret")
}

fn node() -> NodeFacts {
    NodeFacts {
        instance_id: "i-0123456789abcdef0".into(),
        private_ip: "10.0.1.10".into(),
        hostname: "ip-10-0-1-10.us-west-2.compute.internal".into(),
        availability_zone: "us-west-2a".into(),
        resolv_conf: nodeup::model::RESOLVED_RESOLV_CONF.into(),
        baked_images: Default::default(),
        oom_scores_restricted: false,
    }
}

/// The state-store object `key`: from `tests/data/store/<key>` (the keys a rotation added), else the cluster's
/// original secret `original` from `tests/data/secrets/`.
fn object(key: Option<&String>, original: &str) -> String {
    key.map(|k| data().join("store").join(k))
        .filter(|p| p.exists())
        .map(|p| std::fs::read_to_string(p).expect("a stored object"))
        .unwrap_or_else(|| secret(original))
}

fn objects(keys: &[String]) -> Vec<String> {
    keys.iter()
        .map(|k| std::fs::read_to_string(data().join("store").join(k)).expect(k))
        .collect()
}

fn secrets_for(spec: &NodeSpec) -> Secrets {
    let pki = &spec.pki;
    Secrets {
        kubernetes_ca_cert: object(Some(&pki.kubernetes_ca_cert), "kubernetes-ca.crt"),
        kubernetes_ca_trusted: objects(&pki.kubernetes_ca_trusted),
        control_plane: spec.control_plane.as_ref().map(|_| ControlPlaneSecrets {
            kubernetes_ca_key: object(pki.kubernetes_ca_key.as_ref(), "kubernetes-ca.key"),
            etcd_ca_cert: object(pki.etcd_ca_cert.as_ref(), "etcd-ca.crt"),
            etcd_ca_key: object(pki.etcd_ca_key.as_ref(), "etcd-ca.key"),
            etcd_ca_trusted: objects(&pki.etcd_ca_trusted),
            service_account_key: object(pki.service_account_key.as_ref(), "service-account.key"),
            service_account_public_key: object(
                pki.service_account_public_key.as_ref(),
                "service-account.pub",
            ),
            service_account_verify_keys: objects(&pki.service_account_verify_keys),
            encryption_keys: Some(
                yaml_serde::from_str::<EncryptionKeys>(&object(
                    pki.encryption_keys.as_ref(),
                    "encryption-keys.yaml",
                ))
                .expect("keys"),
            ),
        }),
        api_server: spec.api_server.as_ref().map(|_| ApiServerSecrets {
            kubernetes_ca_key: object(pki.kubernetes_ca_key.as_ref(), "kubernetes-ca.key"),
            etcd_ca_cert: object(pki.etcd_ca_cert.as_ref(), "etcd-ca.crt"),
            etcd_ca_trusted: objects(&pki.etcd_ca_trusted),
            etcd_client_cert: object(pki.etcd_client_cert.as_ref(), "etcd-client-api-server.crt"),
            etcd_client_key: object(pki.etcd_client_key.as_ref(), "etcd-client-api-server.key"),
            service_account_key: object(pki.service_account_key.as_ref(), "service-account.key"),
            service_account_public_key: object(
                pki.service_account_public_key.as_ref(),
                "service-account.pub",
            ),
            service_account_verify_keys: objects(&pki.service_account_verify_keys),
            encryption_keys: Some(
                yaml_serde::from_str::<EncryptionKeys>(&object(
                    pki.encryption_keys.as_ref(),
                    "encryption-keys.yaml",
                ))
                .expect("keys"),
            ),
        }),
    }
}

fn render_case(case: &str) -> Rendered {
    let text = std::fs::read_to_string(data().join(case).join("spec.yaml")).expect("spec.yaml");
    let spec: NodeSpec = yaml_serde::from_str(&text).expect("a NodeSpec");
    render::render(&spec, &node(), &secrets_for(&spec)).expect("renders")
}

/// Relative path -> bytes: the files under `expected/`, and the three listings beside them.
fn golden_tree(rendered: &Rendered) -> BTreeMap<String, Vec<u8>> {
    let mut tree = BTreeMap::new();
    let mut listing = String::new();
    for f in &rendered.files {
        tree.insert(format!("expected{}", f.path), f.content.clone());
        listing.push_str(&format!(
            "{:04o} {}:{} {}\n",
            f.mode, f.owner.uid, f.owner.gid, f.path
        ));
    }
    tree.insert("files.txt".into(), listing.into_bytes());
    let mut services = String::new();
    for s in &rendered.services {
        services.push_str(&format!(
            "{} ({})\n  argv: {}\n  triggers: {}\n",
            s.name,
            s.unit,
            s.argv.join(" "),
            s.triggers.join(" ")
        ));
    }
    tree.insert("services.txt".into(), services.into_bytes());
    let certs: String = rendered
        .certificates
        .iter()
        .map(|c| c.summary() + "\n")
        .collect();
    tree.insert("certs.txt".into(), certs.into_bytes());
    tree
}

fn read_tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut tree = BTreeMap::new();
    fn walk(base: &Path, dir: &Path, tree: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(base, &path, tree);
            } else {
                let rel = path
                    .strip_prefix(base)
                    .expect("under base")
                    .display()
                    .to_string();
                tree.insert(rel, std::fs::read(&path).expect("readable"));
            }
        }
    }
    walk(dir, &dir.join("expected"), &mut tree);
    for name in ["files.txt", "services.txt", "certs.txt"] {
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            tree.insert(name.to_string(), bytes);
        }
    }
    tree
}

#[test]
fn rendered_trees_equal_the_golden_files() {
    let bless = ballast_testutil::blessing();
    let mut failures = Vec::new();
    for case in CASES {
        let dir = data().join(case);
        let want = golden_tree(&render_case(case));
        if bless {
            // Blessing rewrites the tree whole, so a file no longer rendered goes with it.
            let _ = std::fs::remove_dir_all(dir.join("expected"));
        }
        for (rel, bytes) in &want {
            if let Err(e) = ballast_testutil::check(&dir.join(rel), bytes) {
                failures.push(format!("{case}: {e}"));
            }
        }
        if bless {
            continue;
        }
        let have = read_tree(&dir);
        for rel in have.keys().filter(|k| !want.contains_key(*k)) {
            failures.push(format!(
                "{case}: {rel} is in the golden files but no longer rendered"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\n(if the change is intended: BALLAST_BLESS=1 cargo test -p nodeup --test golden)",
        failures.join("\n")
    );
}

#[test]
fn rendering_is_deterministic_and_private_files_are_0600() {
    for case in CASES {
        let a = render_case(case);
        let b = render_case(case);
        assert_eq!(a.files, b.files, "{case}");
        for f in &a.files {
            let private = f.path.ends_with(".key")
                || f.path.contains("kubeconfig")
                || f.path.ends_with(".conf") && f.path.starts_with("/etc/kubernetes/")
                || f.path.contains("encryption");
            if private {
                assert_eq!(f.mode, 0o600, "{case}: {} must be 0600", f.path);
            }
        }
    }
}

#[test]
fn workers_never_get_a_ca_key_or_control_plane_files() {
    for case in [
        "worker",
        "worker-custom-kubelet",
        "worker-rotation-add",
        "worker-rotation-promote",
        "worker-rotation-drop",
    ] {
        let r = render_case(case);
        for f in &r.files {
            let text = String::from_utf8_lossy(&f.content);
            assert!(
                !text.contains("PRIVATE KEY"),
                "{case}: {} holds a private key",
                f.path
            );
            assert!(
                !f.path.starts_with("/etc/kubernetes/manifests"),
                "{case}: {}",
                f.path
            );
        }
        assert!(r.certificates.is_empty());
    }
}

/// An API-server node renders kube-apiserver alone, with exactly the control plane's flags but for
/// `--etcd-servers` (every member by its stable name), the etcd client pair from the store where the control
/// plane's API server finds its own, and no CA key on disk: neither the Kubernetes CA's (held in memory to issue
/// its certificates) nor the etcd CA's (it has none).
#[test]
fn an_api_server_node_runs_kube_apiserver_alone_and_holds_no_ca_key() {
    let r = render_case("api-server");
    let manifests: Vec<&str> = r
        .files
        .iter()
        .filter(|f| f.path.starts_with("/etc/kubernetes/manifests/"))
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(manifests, ["/etc/kubernetes/manifests/kube-apiserver.yaml"]);
    for f in &r.files {
        for ca_key in ["kubernetes-ca.key", "etcd-ca.key"] {
            assert_ne!(
                String::from_utf8_lossy(&f.content),
                secret(ca_key),
                "{} holds the {ca_key}",
                f.path
            );
        }
        assert_ne!(f.path, render::pki::KUBERNETES_CA_KEY);
        assert!(!f.path.contains("controller-manager") && !f.path.contains("scheduler"));
    }
    let file = |r: &Rendered, path: &str| {
        r.files
            .iter()
            .find(|f| f.path == path)
            .map(|f| String::from_utf8(f.content.clone()).expect("utf8"))
            .unwrap_or_else(|| panic!("{path} is rendered"))
    };
    let client = format!("{}.key", render::pki::API_SERVER_ETCD_CLIENT);
    assert_eq!(file(&r, &client), secret("etcd-client-api-server.key"));
    // Flag by flag, the control plane's kube-apiserver on the same address, but for where etcd is.
    let command = |r: &Rendered| -> Vec<String> {
        let pod: k8s_openapi::api::core::v1::Pod =
            yaml_serde::from_str(&file(r, "/etc/kubernetes/manifests/kube-apiserver.yaml"))
                .expect("a pod");
        pod.spec.expect("spec").containers[0]
            .command
            .clone()
            .expect("command")
    };
    let ours = command(&r);
    let control_plane = command(&render_case("control-plane"));
    assert_eq!(ours.len(), control_plane.len());
    for (a, b) in ours.iter().zip(&control_plane) {
        if a.starts_with("--etcd-servers=") {
            assert_eq!(
                a,
                "--etcd-servers=https://etcd-control-plane-us-west-2a.internal.demo.example.com:2379,\
                 https://etcd-control-plane-us-west-2b.internal.demo.example.com:2379,\
                 https://etcd-control-plane-us-west-2c.internal.demo.example.com:2379"
            );
        } else {
            assert_eq!(a, b);
        }
    }
    // The same audit policy, authentication and encryption configuration files.
    let cp = render_case("control-plane");
    for path in [
        render::paths::AUDIT_POLICY,
        render::paths::AUTHENTICATION_CONFIG,
        render::paths::ENCRYPTION_CONFIG,
    ] {
        assert_eq!(file(&r, path), file(&cp, path), "{path}");
    }
}

#[test]
fn static_pods_parse_as_pods_and_round_trip() {
    use k8s_openapi::api::core::v1::Pod;
    for case in ["control-plane", "control-plane-encryption-off"] {
        let r = render_case(case);
        let pods: Vec<_> = r
            .files
            .iter()
            .filter(|f| f.path.starts_with("/etc/kubernetes/manifests/"))
            .collect();
        assert_eq!(pods.len(), 3, "{case}");
        for f in pods {
            let text = String::from_utf8(f.content.clone()).expect("utf8");
            let pod: Pod =
                yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.path));
            assert_eq!(
                yaml_serde::to_string(&pod).expect("yaml"),
                text,
                "{}: nothing lost",
                f.path
            );
            let spec = pod.spec.expect("a pod spec");
            assert_eq!(spec.host_network, Some(true));
            let command = spec.containers[0].command.clone().expect("a command");
            if f.path.ends_with("kube-apiserver.yaml") {
                let encrypted = command
                    .iter()
                    .any(|a| a.starts_with("--encryption-provider-config="));
                assert_eq!(encrypted, case == "control-plane", "{case}");
                assert!(command.iter().any(|a| a.starts_with("--audit-log-path=")));
                assert!(command
                    .iter()
                    .any(|a| a.starts_with("--audit-policy-file=")));
            }
        }
    }
}

/// The published fields of each config type: the mirrors deny unknown fields, so a misspelt or invented
/// field fails here.
#[test]
fn configuration_files_parse_back_into_their_types() {
    for case in CASES {
        let r = render_case(case);
        let file = |path: &str| {
            r.files
                .iter()
                .find(|f| f.path == path)
                .map(|f| String::from_utf8(f.content.clone()).expect("utf8"))
        };
        let kubelet = file(render::paths::KUBELET_CONFIG).expect("kubelet config");
        let parsed: KubeletConfiguration =
            yaml_serde::from_str(&kubelet).expect("KubeletConfiguration");
        assert_eq!(parsed.kind, "KubeletConfiguration");
        assert_eq!(parsed.api_version, "kubelet.config.k8s.io/v1beta1");
        assert_eq!(yaml_serde::to_string(&parsed).expect("yaml"), kubelet);
        match file(render::paths::ENCRYPTION_CONFIG) {
            Some(text) => {
                assert!(
                    (case.starts_with("control-plane") || case == "api-server")
                        && case != "control-plane-encryption-off",
                    "{case}"
                );
                let parsed: EncryptionConfiguration =
                    yaml_serde::from_str(&text).expect("EncryptionConfiguration");
                assert_eq!(parsed.api_version, "apiserver.config.k8s.io/v1");
                assert_eq!(yaml_serde::to_string(&parsed).expect("yaml"), text);
                assert!(
                    text.contains("secretbox:") && text.contains("identity: {}"),
                    "{text}"
                );
            }
            None => assert_ne!(case, "control-plane"),
        }
        for f in r.files.iter().filter(|f| {
            f.path.contains("kubeconfig")
                || f.path.ends_with("controller-manager.conf")
                || f.path.ends_with("scheduler.conf")
        }) {
            let text = String::from_utf8(f.content.clone()).expect("utf8");
            let parsed: Kubeconfig =
                yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.path));
            assert_eq!(parsed.kind, "Config");
        }
    }
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut checked = 0;
    for case in CASES {
        for f in render_case(case)
            .files
            .iter()
            .filter(|f| f.path.ends_with(".service"))
        {
            // systemd-analyze checks that ExecStart's binary exists on this host; the kubelet is not installed
            // here, so the copy under test points at /bin/true. Every other line is checked as rendered.
            let text = String::from_utf8(f.content.clone()).expect("utf8");
            let exec = text
                .lines()
                .find_map(|l| l.strip_prefix("ExecStart="))
                .expect("an ExecStart");
            let binary = exec.split_whitespace().next().expect("a binary");
            let text = text.replace(&format!("ExecStart={binary}"), "ExecStart=/bin/true");
            let name = Path::new(&f.path).file_name().expect("name");
            let path = tmp.path().join(case).join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
            let out = std::process::Command::new("systemd-analyze")
                .arg("verify")
                .arg(&path)
                .output()
                .expect("systemd-analyze (apt-get install systemd) must be installed");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && stderr.trim().is_empty(),
                "{case}: {} fails systemd-analyze verify ({}):\n{stderr}",
                f.path,
                out.status
            );
            checked += 1;
        }
    }
    assert_eq!(checked, CASES.len(), "one kubelet unit per case");
}

/// The key-rotation cases' node specs are what `ballast update cluster` renders from the keysets at each stage
/// (the Kubernetes CA, etcd CA, service-account key and encryption key rotated together; a control-plane node's
/// spec and a worker's), so the rendered trees above are those
/// of real stages. `BALLAST_BLESS=1` rewrites them too (then bless again for the trees).
#[test]
fn rotation_node_specs_follow_the_keysets_at_each_stage() {
    use ballast_state::defaults::complete;
    use ballast_state::generate::{generate, ClusterTemplate};
    use ballast_state::keyset::{
        KeyState, Keyset, KeysetItem, KeysetName, NodeKeys, Stage, StageOutcome,
    };
    use ballast_state::node::render_node_spec_with_keys;

    let config = complete(
        &generate(&ClusterTemplate {
            name: "rotate.example.com".into(),
            zones: vec![
                "us-west-2a".into(),
                "us-west-2b".into(),
                "us-west-2c".into(),
            ],
            kubernetes_version: Some("1.33.4".into()),
            ..Default::default()
        })
        .expect("template"),
    );
    let item = |id: &str, original: bool| KeysetItem {
        id: id.into(),
        created: None,
        expires: None,
        state: if original {
            KeyState::Primary
        } else {
            KeyState::Next
        },
        original,
    };
    let mut keysets = [
        (
            KeysetName::KubernetesCa,
            "0000000000000000",
            "1111111111111111",
        ),
        (KeysetName::EtcdCa, "0000000000000001", "2222222222222222"),
        (
            KeysetName::ServiceAccount,
            "0000000000000002",
            "3333333333333333",
        ),
        (
            KeysetName::EncryptionKey,
            "key-1700000000",
            "key-1800000000",
        ),
    ]
    .map(|(name, old, new)| (Keyset::new(name, item(old, true)), new));
    let mut failures = Vec::new();
    for (case, stages) in [
        ("control-plane-rotation-add", &[Stage::Add][..]),
        (
            "control-plane-rotation-promote",
            &[Stage::Promote, Stage::Rewrite][..],
        ),
        ("control-plane-rotation-drop", &[Stage::Drop][..]),
    ] {
        let mut keys = NodeKeys::default();
        for (keyset, new) in &mut keysets {
            for stage in stages {
                if *stage == Stage::Rewrite && keyset.name != KeysetName::EncryptionKey {
                    continue;
                }
                match keyset.stage(*stage, None, || item(new, false)) {
                    Ok(StageOutcome::Changed { keyset: next, .. }) => *keyset = next,
                    other => panic!("{case}: {:?} {stage:?}: {other:?}", keyset.name),
                }
            }
            keys.set(keyset.name, keyset.key_use().expect("key use"));
        }
        // The control plane's node spec, and a worker's: the Kubernetes CA reaches both.
        let worker_case = case.replace("control-plane", "worker");
        for (case, group) in [
            (case, "control-plane-us-west-2a"),
            (worker_case.as_str(), "nodes"),
        ] {
            let spec = render_node_spec_with_keys(
                &config,
                group,
                "s3://demo-state/clusters",
                "api-rotate-example-com-0123456789.elb.us-west-2.amazonaws.com",
                &keys,
            )
            .expect("renders");
            let path = data().join(case).join("spec.yaml");
            if let Err(e) = ballast_testutil::check(&path, &spec.yaml) {
                failures.push(format!("{case}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
