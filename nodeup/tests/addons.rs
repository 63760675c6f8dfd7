//! Golden add-on sets, one per `spec.networking`: for the control-plane node spec of `tests/data/control-plane`
//! with each networking, every object nodeup would apply (`tests/data/addons/<networking>/objects.yaml`) and the
//! list of add-ons, versions and objects (`summary.txt`). `BALLAST_BLESS=1 cargo test -p nodeup --test addons`
//! rewrites them.
//!
//! The release is the embedded manifest's, with TEST digests (the sha256 of each image's reference text, never
//! a real image's digest, so a pin changed in images/manifest.yaml does not change these goldens), and the CNI
//! manifests are test fixtures in the shape of the upstream ones (`tests/data/addons/cni/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast_state::components::{ComponentManifest, ImageDigest, Release};
use ballast_state::node::NodeSpec;
use ballast_state::spec::{CiliumRoutingMode, Networking};
use ballast_testutil::assert_golden;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
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
    render_spec(&spec(networking), name)
}

/// Cilium is rendered by Ballast and reads no baked manifest; the other CNIs read their fixture.
fn render_spec(spec: &NodeSpec, name: &str) -> AddonSet {
    let (minor, release) = test_release(&spec.kubernetes_version);
    let fixture = (spec.networking != Networking::Cilium).then(|| cni_fixture(name));
    addons::render(spec, &release, &minor, fixture.as_deref()).expect("renders")
}

fn native_cilium() -> NodeSpec {
    let mut spec = spec(Networking::Cilium);
    spec.cilium_routing_mode = Some(CiliumRoutingMode::Native);
    spec
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
    // Cilium's other routing mode.
    let set = render_spec(&native_cilium(), "cilium");
    let dir = data().join("addons/cilium-native");
    assert_golden(&dir.join("objects.yaml"), objects_yaml(&set));
    assert_golden(&dir.join("summary.txt"), summary(&set));
}

/// The Pod Identity Webhook's objects for the control-plane spec's cluster with two service accounts with IAM
/// roles and three control-plane nodes (`tests/data/addons/pod-identity-webhook/`), with the test CA certificate
/// (`tests/data/secrets/kubernetes-ca.crt`, a placeholder) as its `caBundle`.
#[test]
fn the_pod_identity_webhook_renders_its_golden_objects() {
    use nodeup::addons::pod_identity_webhook::{PodIdentityWebhookConfig, ServiceAccountRole};
    let spec = spec(Networking::Cilium);
    let (minor, release) = test_release(&spec.kubernetes_version);
    let role = |namespace: &str, name: &str| ServiceAccountRole {
        namespace: namespace.into(),
        name: name.into(),
        role_arn: format!(
            "arn:aws:iam::111122223333:role/{name}.{namespace}.sa.{}",
            spec.cluster_name
        ),
    };
    let config = PodIdentityWebhookConfig {
        region: "us-west-2".into(),
        token_audience: "amazonaws.com".into(),
        ca_certificate_pem: std::fs::read_to_string(data().join("secrets/kubernetes-ca.crt"))
            .expect("the test CA"),
        control_plane_nodes: 3,
        service_accounts: vec![role("team-a", "reader"), role("default", "uploader")],
    };
    let set = addons::set::pod_identity_webhook_set(&release, &minor, &config).expect("renders");
    let dir = data().join("addons/pod-identity-webhook");
    assert_golden(&dir.join("objects.yaml"), objects_yaml(&set));
    assert_golden(&dir.join("summary.txt"), summary(&set));
    // The image is the pinned one, by digest, never pulled; the webhook configuration comes last.
    let text = objects_yaml(&set);
    let images: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("image:"))
        .collect();
    assert_eq!(images.len(), 1, "{images:?}");
    assert!(
        images[0].contains("amazon-eks-pod-identity-webhook:v0.5.7@sha256:"),
        "{}",
        images[0]
    );
    assert!(!text.contains("imagePullPolicy: Always"));
    assert_eq!(
        set.objects.last().map(|o| o.kind().to_string()),
        Some("MutatingWebhookConfiguration".to_string())
    );
    // With the embedded manifest's real pins the image is unpinned, and rendering says so, naming it.
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (minor, real) = manifest
        .release_exact(&spec.kubernetes_version)
        .expect("pinned");
    match addons::set::pod_identity_webhook_set(real, minor, &config) {
        Err(AddonError::ImageUnpinned { reference, .. }) => {
            assert_eq!(
                reference,
                "docker.io/amazon/amazon-eks-pod-identity-webhook:v0.5.7"
            )
        }
        other => panic!(
            "expected ImageUnpinned, got {:?}",
            other.map(|s| s.versions)
        ),
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
        // Ballast's objects never pull what the AMI baked; the upstream manifests' are the CNI module's.
        for object in set
            .objects
            .iter()
            .filter(|o| !["amazon-vpc", "calico"].contains(&o.addon.as_str()))
        {
            let text = object.value.to_string();
            assert!(
                !text.contains("\"imagePullPolicy\":\"Always\""),
                "{}",
                object.describe()
            );
            assert_eq!(
                text.matches("\"image\":").count(),
                text.matches("\"imagePullPolicy\":\"IfNotPresent\"").count(),
                "{}",
                object.describe()
            );
        }
        for object in set
            .objects
            .iter()
            .filter(|o| !["amazon-vpc", "calico"].contains(&o.addon.as_str()))
        {
            let value = object.value.clone();
            let parsed = match object.kind() {
                "ServiceAccount" => serde_json::from_value::<ServiceAccount>(value).map(|_| ()),
                "ClusterRole" => serde_json::from_value::<ClusterRole>(value).map(|_| ()),
                "ClusterRoleBinding" => {
                    serde_json::from_value::<ClusterRoleBinding>(value).map(|_| ())
                }
                "RoleBinding" => serde_json::from_value::<RoleBinding>(value).map(|_| ()),
                "Role" => serde_json::from_value::<Role>(value).map(|_| ()),
                "PodDisruptionBudget" => {
                    serde_json::from_value::<PodDisruptionBudget>(value).map(|_| ())
                }
                "CSIDriver" => serde_json::from_value::<CSIDriver>(value).map(|_| ()),
                "StorageClass" => serde_json::from_value::<StorageClass>(value).map(|_| ()),
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

/// An EBS CSI driver image that cannot be named refuses the driver alone, by name: the network, kube-proxy,
/// CoreDNS and the cloud controller manager are still rendered (a cluster without them cannot run at all).
#[test]
fn an_unpinned_ebs_csi_image_refuses_the_driver_alone() {
    let spec = spec(Networking::Cilium);
    let (minor, mut release) = test_release(&spec.kubernetes_version);
    release
        .addons
        .get_mut("aws-ebs-csi-driver")
        .and_then(|a| a.images.get_mut("csi-provisioner"))
        .expect("the EBS CSI driver's provisioner")
        .digest = ImageDigest::Unpinned;
    let set = addons::render(&spec, &release, &minor, None).expect("renders the rest");
    let why = &set.refused["aws-ebs-csi-driver"];
    assert!(
        why.contains("csi-provisioner") && why.contains("no pinned digest"),
        "{why}"
    );
    let names: std::collections::BTreeSet<&str> =
        set.objects.iter().map(|o| o.addon.as_str()).collect();
    assert!(!names.contains("aws-ebs-csi-driver"), "{names:?}");
    assert!(!set.versions.contains_key("aws-ebs-csi-driver"));
    for kept in ["cilium", "coredns", "aws-cloud-controller-manager"] {
        assert!(names.contains(kept), "{kept}: {names:?}");
    }
    assert!(render(Networking::Cilium, "cilium").refused.is_empty());
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

/// Every `image` an add-on's objects name.
fn images_named(set: &AddonSet, addon: &str) -> std::collections::BTreeSet<String> {
    fn walk(value: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("image", serde_json::Value::String(image)) => {
                            out.insert(image.clone());
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for object in set.objects.iter().filter(|o| o.addon == addon) {
        walk(&object.value, &mut out);
    }
    out
}

#[test]
fn cilium_and_the_ebs_csi_driver_run_exactly_the_images_the_bake_pulls() {
    // What images/install.sh bakes is each add-on's `images` in the manifest, by digest: an image named here and
    // not there would be pulled at boot, one there and not here baked for nothing.
    let (_, release) = test_release("1.33");
    for (spec, addon) in [
        (spec(Networking::Cilium), "cilium"),
        (native_cilium(), "cilium"),
        (spec(Networking::Calico), "aws-ebs-csi-driver"),
    ] {
        let set = render_spec(&spec, &spec.networking_name());
        let baked: std::collections::BTreeSet<String> = release.addons[addon]
            .images
            .values()
            .map(|i| i.pinned_reference().expect("test digests are pinned"))
            .collect();
        assert_eq!(images_named(&set, addon), baked, "{addon}");
    }
}

trait NetworkingName {
    fn networking_name(&self) -> String;
}

impl NetworkingName for NodeSpec {
    fn networking_name(&self) -> String {
        CHOICES
            .iter()
            .find(|(n, _)| *n == self.networking)
            .map(|(_, name)| name.to_string())
            .expect("a networking choice")
    }
}

fn object<'a>(set: &'a AddonSet, describe: &str) -> &'a serde_json::Value {
    &set.objects
        .iter()
        .find(|o| o.describe() == describe)
        .unwrap_or_else(|| panic!("no {describe}"))
        .value
}

#[test]
fn cilium_replaces_kube_proxy_and_reaches_the_api_at_the_node_specs_endpoint() {
    let spec = spec(Networking::Cilium);
    let set = render(Networking::Cilium, "cilium");
    let config = object(&set, "ConfigMap kube-system/cilium-config");
    assert_eq!(config["data"]["kube-proxy-replacement"], "true");
    assert!(!set.objects.iter().any(|o| o.addon == "kube-proxy"));
    // Without kube-proxy the `kubernetes` Service works only once the agent runs: every Cilium container that
    // talks to the API is told the endpoint kubelets use.
    for workload in [
        "DaemonSet kube-system/cilium",
        "Deployment kube-system/cilium-operator",
    ] {
        let text = object(&set, workload).to_string();
        let host = format!(
            "{{\"name\":\"KUBERNETES_SERVICE_HOST\",\"value\":\"{}\"}}",
            spec.api_server_endpoint
        );
        assert!(text.contains(&host), "{workload}: {text}");
        assert!(
            text.contains("{\"name\":\"KUBERNETES_SERVICE_PORT\",\"value\":\"443\"}"),
            "{workload}"
        );
    }
    // Envoy inside the agent: no cilium-envoy DaemonSet.
    assert_eq!(config["data"]["external-envoy-proxy"], "false");
    assert!(!set.objects.iter().any(|o| o.name() == "cilium-envoy"));
}

#[test]
fn cilium_routes_as_the_node_spec_says() {
    let tunnel = render(Networking::Cilium, "cilium");
    let data = &object(&tunnel, "ConfigMap kube-system/cilium-config")["data"];
    assert_eq!(data["routing-mode"], "tunnel");
    assert_eq!(data["tunnel-protocol"], "vxlan");
    assert_eq!(data["auto-direct-node-routes"], "false");
    assert!(data.get("ipv4-native-routing-cidr").is_none());

    let spec = native_cilium();
    let native = render_spec(&spec, "cilium");
    let data = &object(&native, "ConfigMap kube-system/cilium-config")["data"];
    assert_eq!(data["routing-mode"], "native");
    assert!(data.get("tunnel-protocol").is_none());
    assert_eq!(data["auto-direct-node-routes"], "true");
    assert_eq!(data["ipv4-native-routing-cidr"], spec.pod_cidr.as_str());
    assert_eq!(data["cluster-pool-ipv4-cidr"], spec.pod_cidr.as_str());
}

#[test]
fn the_cilium_operator_runs_on_control_plane_nodes_one_per_node() {
    let mut spec = spec(Networking::Cilium);
    let members = spec
        .control_plane
        .as_ref()
        .map(|c| c.etcd.members.len())
        .expect("a control-plane node spec");
    let replicas = |spec: &NodeSpec| {
        let set = render_spec(spec, "cilium");
        let operator = object(&set, "Deployment kube-system/cilium-operator").clone();
        let csi = object(&set, "Deployment kube-system/ebs-csi-controller").clone();
        (operator, csi)
    };
    let (operator, csi) = replicas(&spec);
    assert_eq!(operator["spec"]["replicas"], members.min(2));
    assert_eq!(csi["spec"]["replicas"], members.min(2));
    let pod = &operator["spec"]["template"]["spec"];
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        "node-role.kubernetes.io/control-plane"
    );
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
            ["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert!(pod["tolerations"]
        .to_string()
        .contains("node-role.kubernetes.io/control-plane"));
    // Three control-plane nodes: two replicas; one: one (a second would wait forever for a node of its own).
    let control_plane = spec.control_plane.as_mut().expect("control plane");
    let first = control_plane
        .etcd
        .members
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()));
    control_plane.etcd.members = ["a", "b", "c"]
        .iter()
        .map(|m| (m.to_string(), format!("control-plane-{m}")))
        .collect();
    assert_eq!(replicas(&spec).0["spec"]["replicas"], 2);
    let control_plane = spec.control_plane.as_mut().expect("control plane");
    control_plane.etcd.members = first.into_iter().collect();
    assert_eq!(replicas(&spec).0["spec"]["replicas"], 1);
    assert_eq!(replicas(&spec).1["spec"]["replicas"], 1);
}

#[test]
fn the_ebs_csi_driver_tags_its_volumes_for_the_cluster_and_is_the_default_storage() {
    let spec = spec(Networking::Calico);
    let set = render(Networking::Calico, "calico");
    let controller = object(&set, "Deployment kube-system/ebs-csi-controller").to_string();
    assert!(
        controller.contains(&format!("--k8s-tag-cluster-id={}", spec.cluster_name)),
        "{controller}"
    );
    assert!(!controller.contains("csi-snapshotter"), "{controller}");
    let class = object(&set, "StorageClass gp3");
    assert_eq!(
        class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
        "true"
    );
    assert_eq!(class["provisioner"], "ebs.csi.aws.com");
    assert_eq!(class["parameters"]["type"], "gp3");
    assert_eq!(class["parameters"]["encrypted"], "true");
    assert_eq!(class["volumeBindingMode"], "WaitForFirstConsumer");
    assert_eq!(class["allowVolumeExpansion"], true);
    let node = object(&set, "DaemonSet kube-system/ebs-csi-node");
    let plugin = &node["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(plugin["securityContext"]["privileged"], true);
    assert!(plugin["volumeMounts"]
        .to_string()
        .contains("{\"mountPath\":\"/var/lib/kubelet\",\"mountPropagation\":\"Bidirectional\""));
}

/// `spec.cilium.agentPodAnnotations` and `operatorPodAnnotations` (in the control-plane node spec) land in the
/// pod templates of the agent DaemonSet and the operator Deployment, and nowhere else: every other object of the
/// set is the one rendered without them, and so is each of those two but for its template's annotations. A
/// change of them changes the two objects' applied hash, so the add-on applier applies them again.
#[test]
fn cilium_pod_annotations_go_on_the_agent_s_and_operator_s_pod_templates_only() {
    let plain = render(Networking::Cilium, "cilium");
    let mut annotated_spec = spec(Networking::Cilium);
    annotated_spec.cilium_agent_pod_annotations = BTreeMap::from([
        ("test1".to_string(), "true".to_string()),
        ("example.com/team".to_string(), "network".to_string()),
    ]);
    annotated_spec.cilium_operator_pod_annotations =
        BTreeMap::from([("test3".to_string(), "cilium-operator".to_string())]);
    let annotated = render_spec(&annotated_spec, "cilium");
    assert_eq!(plain.objects.len(), annotated.objects.len());
    let template = "/spec/template/metadata/annotations";
    let mut seen = Vec::new();
    for (before, after) in plain.objects.iter().zip(&annotated.objects) {
        assert_eq!(before.describe(), after.describe());
        let wanted = match (after.kind(), after.name()) {
            ("DaemonSet", "cilium") => Some(&annotated_spec.cilium_agent_pod_annotations),
            ("Deployment", "cilium-operator") => {
                Some(&annotated_spec.cilium_operator_pod_annotations)
            }
            _ => None,
        };
        let Some(wanted) = wanted else {
            assert_eq!(before, after, "{} changed", after.describe());
            continue;
        };
        seen.push(after.describe());
        assert_eq!(
            before.value.pointer(template),
            None,
            "{}",
            before.describe()
        );
        assert_eq!(
            after.value.pointer(template),
            Some(&serde_json::to_value(wanted).expect("json")),
            "{}",
            after.describe()
        );
        let mut stripped = after.value.clone();
        if let Some(metadata) = stripped
            .pointer_mut("/spec/template/metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            metadata.remove("annotations");
        }
        assert_eq!(before.value, stripped, "{}", after.describe());
        assert_ne!(before.content_sha256(), after.content_sha256());
    }
    assert_eq!(
        seen,
        vec![
            "DaemonSet kube-system/cilium".to_string(),
            "Deployment kube-system/cilium-operator".to_string()
        ]
    );
}

/// The control-plane spec with the cluster autoscaler on, as `update cluster` writes it: the priority expander
/// with two tiers and, when `irsa`, a role of its own.
fn autoscaler_spec(irsa: bool) -> NodeSpec {
    use ballast_state::autoscaler::{ClusterAutoscalerSettings, PriorityTier};
    use ballast_state::spec::AutoscalerExpander;
    let mut spec = spec(Networking::Cilium);
    let control_plane = spec.control_plane.as_mut().expect("a control-plane spec");
    control_plane.cluster_autoscaler = Some(ClusterAutoscalerSettings {
        region: "us-west-2".into(),
        expander: AutoscalerExpander::Priority,
        balance_similar_node_groups: true,
        skip_nodes_with_local_storage: false,
        skip_nodes_with_system_pods: true,
        scale_down_delay_after_add: "10m".into(),
        scale_down_unneeded_time: "5m".into(),
        max_node_provision_time: "15m".into(),
        priorities: vec![
            PriorityTier {
                priority: 50,
                groups: vec!["spot.demo.example.com".into()],
            },
            PriorityTier {
                priority: 0,
                groups: vec!["nodes.demo.example.com".into()],
            },
        ],
    });
    if irsa {
        control_plane
            .addon_roles
            .get_or_insert_with(Default::default)
            .cluster_autoscaler = Some(
            "arn:aws:iam::111122223333:role/cluster-autoscaler.kube-system.sa.demo.example.com"
                .into(),
        );
    }
    spec
}

/// The cluster autoscaler's objects (`tests/data/addons/cluster-autoscaler/`, on IRSA with the priority
/// expander): every object typed, its one image pinned and never pulled, the Deployment on control-plane nodes
/// only, system-cluster-critical, on its web-identity role; without IRSA the same objects without the token.
#[test]
fn the_cluster_autoscaler_renders_its_golden_objects() {
    let spec = autoscaler_spec(true);
    let (minor, release) = test_release(&spec.kubernetes_version);
    let settings = spec
        .control_plane
        .as_ref()
        .and_then(|c| c.cluster_autoscaler.clone())
        .expect("settings");
    let set =
        addons::set::cluster_autoscaler_set(&spec, &settings, &release, &minor).expect("renders");
    let dir = data().join("addons/cluster-autoscaler");
    assert_golden(&dir.join("objects.yaml"), objects_yaml(&set));
    assert_golden(&dir.join("summary.txt"), summary(&set));
    for object in &set.objects {
        let value = object.value.clone();
        let parsed = match object.kind() {
            "ServiceAccount" => serde_json::from_value::<ServiceAccount>(value).map(|_| ()),
            "ClusterRole" => serde_json::from_value::<ClusterRole>(value).map(|_| ()),
            "Role" => serde_json::from_value::<Role>(value).map(|_| ()),
            "ClusterRoleBinding" => serde_json::from_value::<ClusterRoleBinding>(value).map(|_| ()),
            "RoleBinding" => serde_json::from_value::<RoleBinding>(value).map(|_| ()),
            "ConfigMap" => serde_json::from_value::<ConfigMap>(value).map(|_| ()),
            "Deployment" => serde_json::from_value::<Deployment>(value).map(|_| ()),
            other => panic!("the autoscaler writes an untyped {other}"),
        };
        parsed.unwrap_or_else(|e| panic!("{}: {e}", object.describe()));
    }
    let deployment = object(&set, "Deployment kube-system/cluster-autoscaler");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["nodeSelector"]["node-role.kubernetes.io/control-plane"],
        ""
    );
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["serviceAccountName"], "cluster-autoscaler");
    let container = &pod["containers"][0];
    assert_eq!(container["imagePullPolicy"], "IfNotPresent");
    assert!(container["image"].as_str().is_some_and(
        |i| i.starts_with("registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.1@sha256:")
    ));
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    for flag in [
        "--cloud-provider=aws",
        "--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/demo.example.com",
        "--expander=priority",
        "--balance-similar-node-groups=true",
        "--skip-nodes-with-local-storage=false",
        "--scale-down-unneeded-time=5m",
    ] {
        assert!(args.contains(&flag), "{flag} not in {args:?}");
    }
    let env = container["env"].to_string();
    assert!(
        env.contains("cluster-autoscaler.kube-system.sa.demo.example.com"),
        "{env}"
    );
    let priorities = object(
        &set,
        "ConfigMap kube-system/cluster-autoscaler-priority-expander",
    );
    assert_eq!(
        priorities["data"]["priorities"],
        "50:\n  - '^spot\\.demo\\.example\\.com$'\n0:\n  - '^nodes\\.demo\\.example\\.com$'\n"
    );

    // Without IRSA: the instance role's credentials, no token, no role ARN; the rest as on IRSA.
    let plain =
        addons::set::cluster_autoscaler_set(&autoscaler_spec(false), &settings, &release, &minor)
            .expect("renders");
    let text = objects_yaml(&plain);
    assert!(!text.contains("AWS_ROLE_ARN"), "{text}");
    assert!(!text.contains("aws-iam-token"), "{text}");
    assert_eq!(plain.objects.len(), set.objects.len());
}

/// The autoscaler is applied only when the node spec turns it on, is listed in the set's versions (what the
/// boot report's add-on section shows), and is refused alone, by name, when its image is unpinned (1.34 in the
/// embedded manifest): the rest of the set still applies.
#[test]
fn the_cluster_autoscaler_is_applied_when_on_and_refused_alone_when_unpinned() {
    let ca =
        std::fs::read_to_string(data().join("secrets/kubernetes-ca.crt")).expect("the test CA");
    // Off: nothing of it.
    let off = spec(Networking::Cilium);
    let (minor, release) = test_release(&off.kubernetes_version);
    let base = addons::render(&off, &release, &minor, None).expect("renders");
    let (set, refused) = addons::set::applied_set(base.clone(), &off, &release, &minor, &ca);
    assert!(!set.versions.contains_key("cluster-autoscaler"));
    assert!(set.objects.iter().all(|o| o.addon != "cluster-autoscaler"));
    assert!(!refused.contains_key("cluster-autoscaler"));
    // On: its objects join the set, in apply order, and its version is reported.
    let on = autoscaler_spec(false);
    let base = addons::render(&on, &release, &minor, None).expect("renders");
    let (set, refused) = addons::set::applied_set(base.clone(), &on, &release, &minor, &ca);
    assert_eq!(
        set.versions.get("cluster-autoscaler").map(String::as_str),
        Some("1.33.1")
    );
    assert!(refused.is_empty(), "{refused:?}");
    let ours: Vec<String> = set
        .objects
        .iter()
        .filter(|o| o.addon == "cluster-autoscaler")
        .map(|o| o.describe())
        .collect();
    assert_eq!(ours.len(), 7, "{ours:?}");
    let position = |describe: &str| {
        set.objects
            .iter()
            .position(|o| o.describe() == describe)
            .unwrap_or_else(|| panic!("{describe} missing"))
    };
    assert!(
        position("ServiceAccount kube-system/cluster-autoscaler")
            < position("ClusterRoleBinding cluster-autoscaler")
    );
    assert!(
        position("ClusterRoleBinding cluster-autoscaler")
            < position("Deployment kube-system/cluster-autoscaler")
    );
    // 1.34 with the embedded manifest's real pins: the autoscaler's image is unpinned, so it alone is refused
    // (naming the image), and the set is applied without it.
    let mut on_134 = autoscaler_spec(false);
    on_134.kubernetes_version = "1.34.0".into();
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (minor, real) = manifest.release_exact("1.34.0").expect("pinned");
    match addons::set::with_cluster_autoscaler(base.clone(), &on_134, real, minor) {
        Err(AddonError::ImageUnpinned { reference, .. }) => assert_eq!(
            reference,
            "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.4"
        ),
        other => panic!(
            "expected ImageUnpinned, got {:?}",
            other.map(|s| s.versions)
        ),
    }
    let (set, refused) = addons::set::applied_set(base.clone(), &on_134, real, minor, &ca);
    assert!(
        refused
            .get("cluster-autoscaler")
            .is_some_and(|why| why.contains("cluster-autoscaler:v1.34.4")),
        "{refused:?}"
    );
    assert!(set.objects.iter().all(|o| o.addon != "cluster-autoscaler"));
    assert_eq!(set.objects.len(), base.objects.len());
}

/// kubenet is no add-on: the set holds no CNI object, kube-proxy and CoreDNS as with the others, and the cloud
/// controller manager writes the VPC's routes to each node's PodCIDR.
#[test]
fn kubenet_adds_no_cni_and_turns_the_route_controller_on() {
    let spec = spec(Networking::Kubenet);
    let (minor, release) = test_release(&spec.kubernetes_version);
    let set =
        addons::render(&spec, &release, &minor, None).expect("renders without a CNI manifest");
    let names: std::collections::BTreeSet<&str> =
        set.objects.iter().map(|o| o.addon.as_str()).collect();
    for cni in ["amazon-vpc", "calico", "cilium"] {
        assert!(!names.contains(cni), "{names:?}");
    }
    assert!(
        names.contains("kube-proxy") && names.contains("coredns"),
        "{names:?}"
    );
    let ccm = set
        .objects
        .iter()
        .find(|o| o.addon == "aws-cloud-controller-manager" && o.kind() == "DaemonSet")
        .expect("the cloud controller manager");
    let args = ccm.value["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--configure-cloud-routes=true"), "{args}");
    assert!(args.contains("--allocate-node-cidrs=true"), "{args}");
    assert!(
        args.contains(&format!("--cluster-cidr={}", spec.pod_cidr)),
        "{args}"
    );
    let cilium = render(Networking::Cilium, "cilium");
    let other = cilium
        .objects
        .iter()
        .find(|o| o.addon == "aws-cloud-controller-manager" && o.kind() == "DaemonSet")
        .expect("the cloud controller manager");
    assert!(other
        .value
        .to_string()
        .contains("--configure-cloud-routes=false"));
}

/// The AWS endpoint overrides of nodeup's environment reach the cloud controller manager's, and nothing else.
#[test]
fn the_nodes_aws_endpoints_reach_the_cloud_controller_manager() {
    let endpoints = addons::aws_endpoints([
        (
            "AWS_ENDPOINT_URL".to_string(),
            "http://169.254.169.250".to_string(),
        ),
        (
            "AWS_ENDPOINT_URL_STS".to_string(),
            "https://sts.example".to_string(),
        ),
        ("AWS_ENDPOINT_URL_EMPTY".to_string(), String::new()),
        ("AWS_REGION".to_string(), "us-west-2".to_string()),
        ("PATH".to_string(), "/usr/bin".to_string()),
    ]);
    assert_eq!(
        endpoints.keys().map(String::as_str).collect::<Vec<_>>(),
        ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS"]
    );
    let set = render(Networking::Cilium, "cilium");
    let unchanged = addons::with_aws_endpoints(set.clone(), &BTreeMap::new());
    assert_eq!(unchanged, set);
    let with = addons::with_aws_endpoints(set.clone(), &endpoints);
    for (before, after) in set.objects.iter().zip(&with.objects) {
        if after.addon == "aws-cloud-controller-manager" && after.kind() == "DaemonSet" {
            let env = &after.value["spec"]["template"]["spec"]["containers"][0]["env"];
            assert!(
                env.as_array()
                    .is_some_and(|e| e.contains(&serde_json::json!(
                        {"name": "AWS_ENDPOINT_URL", "value": "http://169.254.169.250"}
                    ))),
                "{env}"
            );
        } else {
            assert_eq!(before, after, "{}", after.describe());
        }
    }
}

/// The cluster's `kubeProxy.conntrackMaxPerCore` reaches kube-proxy's configuration; unset, nothing is written
/// and kube-proxy's default holds.
#[test]
fn kube_proxy_takes_the_clusters_conntrack_setting() {
    let config = |spec: &NodeSpec| {
        let set = render_spec(spec, "calico");
        set.objects
            .iter()
            .find(|o| o.addon == "kube-proxy" && o.kind() == "ConfigMap")
            .expect("kube-proxy's configuration")
            .value["data"]["config.conf"]
            .as_str()
            .expect("its configuration file")
            .to_string()
    };
    let mut spec = spec(Networking::Calico);
    assert!(!config(&spec).contains("conntrack"), "{}", config(&spec));
    spec.kube_proxy_conntrack_max_per_core = Some(0);
    assert!(
        config(&spec).ends_with("conntrack:\n  maxPerCore: 0\n"),
        "{}",
        config(&spec)
    );
}
