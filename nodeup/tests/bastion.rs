//! nodeup on a bastion (`role: Bastion`, docs/nodeup.md "Bastions"): from its node spec it renders root's
//! `authorized_keys` and nothing of Kubernetes, and it fetches no secret: its role may read nothing but bastion
//! node specs, so an empty state store (no CA certificate at all) is enough for its fetch step.

use std::time::{Duration, Instant};

use ballast_state::node::NodeSpec;
use ballast_state::spec::Role;
use nodeup::model::{paths, NodeFacts, Secrets};

fn bastion_spec() -> NodeSpec {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/worker/spec.yaml"),
    )
    .expect("the worker golden spec");
    let mut spec: NodeSpec = yaml_serde::from_str(&text).expect("a node spec");
    spec.role = Role::Bastion;
    spec.instance_group = "bastion".into();
    spec.ssh_authorized_keys = vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB op@example".into()];
    spec
}

fn facts() -> NodeFacts {
    NodeFacts {
        instance_id: "i-0123456789abcdef0".into(),
        private_ip: "172.20.4.10".into(),
        hostname: "ip-172-20-4-10.ec2.internal".into(),
        availability_zone: "us-west-2a".into(),
        resolv_conf: nodeup::model::RESOLVED_RESOLV_CONF.into(),
        baked_images: Default::default(),
        oom_scores_restricted: false,
    }
}

#[test]
fn a_bastion_renders_the_operator_s_keys_and_nothing_of_kubernetes() {
    let secrets = Secrets {
        kubernetes_ca_cert: String::new(),
        kubernetes_ca_trusted: Vec::new(),
        control_plane: None,
        api_server: None,
    };
    let rendered = nodeup::render::render(&bastion_spec(), &facts(), &secrets).expect("renders");
    let files: Vec<(&str, u32)> = rendered
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.mode))
        .collect();
    assert_eq!(files, vec![(paths::AUTHORIZED_KEYS, 0o600)]);
    let text = String::from_utf8_lossy(&rendered.files[0].content);
    assert!(
        text.contains("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB op@example\n"),
        "{text}"
    );
    assert!(rendered.services.is_empty(), "{:?}", rendered.services);
    assert!(rendered.certificates.is_empty());
}

#[tokio::test]
async fn a_bastion_fetches_no_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A file store's root is the operator's alone (docs/architecture.md).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let store = nodeup::fetch::open(&format!("file://{}", dir.path().display()))
        .await
        .expect("store");
    let deadline = Instant::now() + Duration::from_secs(5);
    let secrets = nodeup::fetch::secrets(&store, &bastion_spec(), deadline)
        .await
        .expect("nothing to fetch");
    assert!(secrets.kubernetes_ca_cert.is_empty() && secrets.control_plane.is_none());
    // A worker's spec on the same empty store fails on the CA certificate: the store really is empty.
    let mut worker = bastion_spec();
    worker.role = Role::Node;
    assert!(nodeup::fetch::secrets(&store, &worker, deadline)
        .await
        .is_err());
}
