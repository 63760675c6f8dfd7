//! Golden add-on sets, one per `spec.networking`: for the control-plane node spec of `tests/data/control-plane`
//! with each networking, every object nodeup would apply (`tests/data/addons/<networking>/objects.yaml`) and the
//! list of add-ons, versions and objects (`summary.txt`). `BALLAST_BLESS=1 cargo test -p nodeup --test addons`
//! rewrites them.
//!
//! The release is the embedded manifest's, with TEST digests (the sha256 of each image's reference text, never
//! a real image's digest: the real ones are unpinned until images/pin.sh can reach the registries), and the CNI
//! manifests are test fixtures in the shape of the upstream ones (`tests/data/addons/cni/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast_state::components::{ComponentManifest, ImageDigest, Release};
use ballast_state::node::NodeSpec;
use ballast_state::spec::Networking;
use ballast_testutil::assert_golden;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use nodeup::addons::{self, AddonError, AddonSet};
use sha2::{Digest, Sha256};

const CHOICES: [(Networking, &str); 3] = [
    (Networking::AmazonVpc, "amazon-vpc"),
    (Networking::Calico, "calico"),
    (Networking::Cilium, "cilium"),
];

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn spec(networking: Networking) -> NodeSpec {
    let text = std::fs::read_to_string(data().join("control-plane/spec.yaml")).expect("spec");
    let mut spec: NodeSpec = yaml_serde::from_str(&text).expect("a node spec");
    spec.networking = networking;
    spec
}

/// The embedded release with test digests (see the module's comment).
fn test_release(version: &str) -> (String, Release) {
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (minor, release) = manifest.release_exact(version).expect("pinned");
    let mut release = release.clone();
    for addon in release.addons.values_mut() {
        for image in addon.images.values_mut() {
            image.digest =
                ImageDigest::Pinned(hex::encode(Sha256::digest(image.reference.as_bytes())));
        }
    }
    (minor.to_string(), release)
}

fn cni_fixture(name: &str) -> String {
    std::fs::read_to_string(data().join(format!("addons/cni/{name}.yaml"))).expect("a fixture")
}

fn render(networking: Networking, name: &str) -> AddonSet {
    let spec = spec(networking);
    let (minor, release) = test_release(&spec.kubernetes_version);
    addons::render(&spec, &release, &minor, Some(&cni_fixture(name))).expect("renders")
}

fn objects_yaml(set: &AddonSet) -> String {
    let header = "# Golden add-on set (nodeup/tests/addons.rs). The image digests are TEST values, the sha256 of each\n\
                  # reference's text, never a real image's; the CNI objects come from test fixtures.\n";
    let objects: String = set
        .objects
        .iter()
        .map(|o| format!("---\n{}", yaml_serde::to_string(&o.value).expect("yaml")))
        .collect();
    format!("{header}{objects}")
}

fn summary(set: &AddonSet) -> String {
    let mut out = String::from("# add-on versions\n");
    for (addon, version) in &set.versions {
        out.push_str(&format!("{addon} {version}\n"));
    }
    out.push_str("# objects, in apply order\n");
    for object in &set.objects {
        out.push_str(&format!(
            "{} {} {}\n",
            object.addon,
            object.api_version(),
            object.describe()
        ));
    }
    out
}

#[test]
fn each_networking_choice_renders_its_golden_addon_set() {
    for (networking, name) in CHOICES {
        let set = render(networking, name);
        let dir = data().join("addons").join(name);
        assert_golden(&dir.join("objects.yaml"), objects_yaml(&set));
        assert_golden(&dir.join("summary.txt"), summary(&set));
    }
}

#[test]
fn kube_proxy_is_installed_unless_cilium_replaces_it() {
    for (networking, name) in CHOICES {
        let set = render(networking, name);
        let has_proxy = set.versions.contains_key("kube-proxy");
        assert_eq!(has_proxy, networking != Networking::Cilium, "{name}");
        assert!(set.versions.contains_key(name), "{name}");
        for other in ["amazon-vpc", "calico", "cilium"] {
            if other != name {
                assert!(!set.versions.contains_key(other), "{name} installs {other}");
            }
        }
    }
}

#[test]
fn every_image_is_pinned_by_digest_and_every_ballast_object_is_typed() {
    for (networking, name) in CHOICES {
        let set = render(networking, name);
        let text = objects_yaml(&set);
        for line in text
            .lines()
            .filter(|l| l.trim_start().starts_with("image:"))
        {
            assert!(line.contains("@sha256:"), "{name}: {line}");
        }
        // The upstream digest in the cilium fixture is replaced by the pin.
        assert!(!text.contains(&"0".repeat(64)), "{name}");
        for object in set.objects.iter().filter(|o| o.addon != name) {
            let value = object.value.clone();
            let parsed = match object.kind() {
                "ServiceAccount" => serde_json::from_value::<ServiceAccount>(value).map(|_| ()),
                "ClusterRole" => serde_json::from_value::<ClusterRole>(value).map(|_| ()),
                "ClusterRoleBinding" => {
                    serde_json::from_value::<ClusterRoleBinding>(value).map(|_| ())
                }
                "RoleBinding" => serde_json::from_value::<RoleBinding>(value).map(|_| ()),
                "ConfigMap" => serde_json::from_value::<ConfigMap>(value).map(|_| ()),
                "Service" => serde_json::from_value::<Service>(value).map(|_| ()),
                "DaemonSet" => serde_json::from_value::<DaemonSet>(value).map(|_| ()),
                "Deployment" => serde_json::from_value::<Deployment>(value).map(|_| ()),
                other => panic!("Ballast writes an untyped {other}"),
            };
            parsed.unwrap_or_else(|e| panic!("{}: {e}", object.describe()));
        }
    }
}

#[test]
fn the_dns_service_uses_the_node_specs_cluster_dns_ip() {
    let set = render(Networking::Calico, "calico");
    let service = set
        .objects
        .iter()
        .find(|o| o.describe() == "Service kube-system/kube-dns")
        .expect("the DNS service");
    assert_eq!(
        service.value.pointer("/spec/clusterIP"),
        Some(&serde_json::json!(spec(Networking::Calico).cluster_dns))
    );
}

#[test]
fn an_unpinned_digest_is_refused_naming_the_addon() {
    let spec = spec(Networking::Calico);
    let manifest = ComponentManifest::embedded().expect("embedded");
    let (minor, release) = manifest.release_exact("1.33").expect("1.33");
    // The embedded manifest's digests are all unpinned: rendering refuses to name an image by tag alone.
    let err =
        addons::render(&spec, release, minor, Some(&cni_fixture("calico"))).expect_err("unpinned");
    assert!(matches!(err, AddonError::ImageUnpinned { .. }), "{err}");
    assert!(err.to_string().contains("has no pinned digest"), "{err}");
}

#[test]
fn bad_cni_manifests_are_refused_with_what_is_wrong() {
    let spec = spec(Networking::Calico);
    let (minor, release) = test_release("1.33");
    let render = |text: Option<&str>| {
        addons::render(&spec, &release, &minor, text)
            .expect_err("refused")
            .to_string()
    };
    let missing = render(None);
    assert!(
        missing.contains("/etc/ballast/addons/calico.yaml"),
        "{missing}"
    );
    let unknown_image = render(Some(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\n  namespace: kube-system\nspec:\n  template:\n    spec:\n      containers:\n        - name: x\n          image: docker.io/library/busybox:1\n",
    ));
    assert!(
        unknown_image.contains("DaemonSet kube-system/x runs image docker.io/library/busybox:1"),
        "{unknown_image}"
    );
    let no_kind = render(Some("apiVersion: v1\nmetadata:\n  name: x\n"));
    assert!(no_kind.contains("document 1 has no kind"), "{no_kind}");
    let empty = render(Some("---\n---\n"));
    assert!(empty.contains("holds no object"), "{empty}");
    let not_yaml = render(Some("apiVersion: v1\nkind: [\n"));
    assert!(not_yaml.contains("document 1 is not YAML"), "{not_yaml}");
}

#[test]
fn the_set_hash_follows_the_content() {
    let a = render(Networking::Calico, "calico");
    let b = render(Networking::Calico, "calico");
    assert_eq!(a.sha256(), b.sha256());
    let c = render(Networking::AmazonVpc, "amazon-vpc");
    assert_ne!(a.sha256(), c.sha256());
    let versions: BTreeMap<_, _> = a.versions.clone();
    assert_eq!(versions.get("calico").map(String::as_str), Some("3.30.2"));
}
