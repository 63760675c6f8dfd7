//! Ballast's AWS-calling add-ons on IRSA: with the node spec's `addonRoles` (the control-plane spec of
//! `tests/data/control-plane-irsa`), the cloud controller manager's DaemonSet and the EBS CSI controller's
//! Deployment carry the projected `amazonaws.com` token and `AWS_ROLE_ARN`/`AWS_WEB_IDENTITY_TOKEN_FILE` (the
//! driver container only, not its sidecars), so they need no webhook; without roles they carry neither.
//! With the node spec's `podIdentityWebhook`, the applier's set also carries the Pod Identity Webhook, configured
//! from it (region, audience, each service account's role) with the node's Kubernetes CA as its `caBundle`;
//! without it, the set is the same as before.
//! Golden: `tests/data/addons/irsa/objects.yaml` and `tests/data/addons/irsa/applied.txt` (the applied set's
//! objects in order) (`BALLAST_BLESS=1 cargo test -p nodeup --test addons_irsa`).

use std::path::{Path, PathBuf};

use ballast_state::components::{ComponentManifest, ImageDigest, Release};
use ballast_state::node::NodeSpec;
use ballast_testutil::assert_golden;
use nodeup::addons::set::with_pod_identity_webhook;
use nodeup::addons::{self, AddonSet};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn spec(case: &str) -> NodeSpec {
    let text = std::fs::read_to_string(data().join(case).join("spec.yaml")).expect("spec");
    yaml_serde::from_str(&text).expect("a node spec")
}

/// The spec's release with every image digest a test value (as in `addons.rs`), and its minor.
fn test_release(spec: &NodeSpec) -> (String, Release) {
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (minor, release) = manifest
        .release_exact(&spec.kubernetes_version)
        .expect("pinned");
    let mut release = release.clone();
    for addon in release.addons.values_mut() {
        for image in addon.images.values_mut() {
            image.digest =
                ImageDigest::Pinned(hex::encode(Sha256::digest(image.reference.as_bytes())));
        }
    }
    (minor.to_string(), release)
}

/// Cilium (the specs' networking) reads no baked CNI manifest.
fn render(spec: &NodeSpec) -> AddonSet {
    let (minor, release) = test_release(spec);
    addons::render(spec, &release, &minor, None).expect("renders")
}

/// What the applier applies (`runner::AddonJob`): the set and, when the node spec installs it, the webhook.
fn render_as_applied(spec: &NodeSpec, ca_pem: &str) -> AddonSet {
    let (minor, release) = test_release(spec);
    let set = addons::render(spec, &release, &minor, None).expect("renders");
    with_pod_identity_webhook(set, spec, &release, &minor, ca_pem).expect("renders the webhook")
}

fn pod<'a>(set: &'a AddonSet, describe: &str) -> &'a Value {
    &set.objects
        .iter()
        .find(|o| o.describe() == describe)
        .unwrap_or_else(|| panic!("no {describe}"))
        .value["spec"]["template"]["spec"]
}

fn env_of<'a>(pod: &'a Value, container: &str) -> Vec<(&'a str, &'a str)> {
    pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == container)
        .unwrap_or_else(|| panic!("no container {container}"))["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str().unwrap_or(""))))
                .collect()
        })
        .unwrap_or_default()
}

const CCM: &str = "DaemonSet kube-system/aws-cloud-controller-manager";
const EBS: &str = "Deployment kube-system/ebs-csi-controller";

#[test]
fn the_addons_run_on_their_roles_with_a_projected_token() {
    let set = render(&spec("control-plane-irsa"));
    let token_file = "/var/run/secrets/amazonaws.com/token";
    for (describe, container, role) in [
        (
            CCM,
            "aws-cloud-controller-manager",
            "arn:aws:iam::123456789012:role/cloud-controller-manager.kube-system.sa.demo.example.com",
        ),
        (
            EBS,
            "ebs-plugin",
            "arn:aws:iam::123456789012:role/ebs-csi-controller-sa.kube-system.sa.demo.example.com",
        ),
    ] {
        let pod = pod(&set, describe);
        let env = env_of(pod, container);
        assert!(env.contains(&("AWS_ROLE_ARN", role)), "{describe}: {env:?}");
        assert!(
            env.contains(&("AWS_WEB_IDENTITY_TOKEN_FILE", token_file)),
            "{describe}: {env:?}"
        );
        let volume = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == "aws-iam-token")
            .unwrap_or_else(|| panic!("{describe}: no token volume"));
        let projection = &volume["projected"]["sources"][0]["serviceAccountToken"];
        assert_eq!(projection["audience"], "amazonaws.com", "{describe}");
        assert_eq!(projection["path"], "token", "{describe}");
    }
    // The sidecars call no AWS API and get no credentials.
    let ebs = pod(&set, EBS);
    for sidecar in [
        "csi-provisioner",
        "csi-attacher",
        "csi-resizer",
        "liveness-probe",
    ] {
        assert!(
            env_of(ebs, sidecar)
                .iter()
                .all(|(name, _)| !name.starts_with("AWS_")),
            "{sidecar}"
        );
    }
    let golden: String = [CCM, EBS]
        .iter()
        .map(|d| {
            let object = &set
                .objects
                .iter()
                .find(|o| o.describe() == *d)
                .expect("object")
                .value;
            format!("---\n{}", yaml_serde::to_string(object).expect("yaml"))
        })
        .collect();
    assert_golden(
        &data().join("addons/irsa/objects.yaml"),
        format!("# The IRSA add-ons' workloads (nodeup/tests/addons_irsa.rs); image digests are TEST values.\n{golden}"),
    );
}

#[test]
fn without_roles_the_addons_use_the_instance_role() {
    let set = render(&spec("control-plane"));
    for (describe, container) in [(CCM, "aws-cloud-controller-manager"), (EBS, "ebs-plugin")] {
        let pod = pod(&set, describe);
        assert!(env_of(pod, container)
            .iter()
            .all(|(name, _)| !name.starts_with("AWS_")));
        assert!(pod["volumes"]
            .as_array()
            .is_none_or(|v| v.iter().all(|v| v["name"] != "aws-iam-token")));
    }
}

const TEST_CA: &str =
    "-----BEGIN CERTIFICATE-----\nTEST-KUBERNETES-CA\n-----END CERTIFICATE-----\n";

#[test]
fn the_applied_set_carries_the_webhook_configured_from_the_node_spec() {
    let spec = spec("control-plane-irsa");
    let base = render(&spec);
    let set = render_as_applied(&spec, TEST_CA);
    assert_eq!(
        set.versions.get("pod-identity-webhook").map(String::as_str),
        Some("0.5.7")
    );
    // Every object of the set without it is still there, in the same order; the webhook's ten are added.
    let others: Vec<_> = set
        .objects
        .iter()
        .filter(|o| o.addon != "pod-identity-webhook")
        .collect();
    assert_eq!(others.len(), base.objects.len());
    assert!(others.iter().zip(&base.objects).all(|(a, b)| *a == b));
    assert_eq!(set.objects.len(), base.objects.len() + 10);
    // The admission webhook is applied last, after the Deployment that serves it.
    assert_eq!(
        set.objects.last().map(|o| o.describe()).as_deref(),
        Some("MutatingWebhookConfiguration pod-identity-webhook")
    );
    let object = |describe: &str| {
        &set.objects
            .iter()
            .find(|o| o.describe() == describe)
            .unwrap_or_else(|| panic!("no {describe}"))
            .value
    };
    let config = object("ConfigMap kube-system/pod-identity-webhook")["data"]["config"]
        .as_str()
        .expect("the webhook's config");
    let mappings: Value = serde_json::from_str(config).expect("json");
    assert_eq!(
        mappings["team-a/reports"]["RoleARN"],
        "arn:aws:iam::123456789012:role/reports.team-a.sa.demo.example.com"
    );
    assert_eq!(mappings["team-a/reports"]["Audience"], "amazonaws.com");
    assert_eq!(mappings.as_object().map(|m| m.len()), Some(1));
    let args: Vec<&str> = object("Deployment kube-system/pod-identity-webhook")["spec"]["template"]
        ["spec"]["containers"][0]["command"]
        .as_array()
        .expect("the command")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--aws-default-region=us-west-2"), "{args:?}");
    assert!(args.contains(&"--token-audience=amazonaws.com"), "{args:?}");
    let ca_bundle = object("MutatingWebhookConfiguration pod-identity-webhook")["webhooks"][0]
        ["clientConfig"]["caBundle"]
        .as_str()
        .expect("caBundle");
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(ca_bundle)
            .expect("base64"),
        TEST_CA.as_bytes()
    );
    let listing: String = set
        .objects
        .iter()
        .map(|o| format!("{} {}\n", o.addon, o.describe()))
        .collect();
    assert_golden(
        &data().join("addons/irsa/applied.txt"),
        format!("# The applied set of tests/data/control-plane-irsa, in order (nodeup/tests/addons_irsa.rs).\n{listing}"),
    );
}

#[test]
fn without_webhook_settings_the_applied_set_is_the_rendered_one() {
    let spec = spec("control-plane");
    assert_eq!(render_as_applied(&spec, TEST_CA), render(&spec));
}

const AWS_NODE: &str = "DaemonSet kube-system/aws-node";
const AWS_NODE_ROLE: &str =
    "arn:aws:iam::123456789012:role/aws-node.kube-system.sa.demo.example.com";

/// The VPC CNI's set (the upstream-shaped fixture `tests/data/addons/cni/amazon-vpc.yaml`) for `spec` turned to
/// amazon-vpc, with `aws_node` as its role.
fn amazon_vpc(spec: &NodeSpec, aws_node: Option<&str>) -> AddonSet {
    let mut spec = spec.clone();
    spec.networking = ballast_state::spec::Networking::AmazonVpc;
    if let Some(roles) = spec
        .control_plane
        .as_mut()
        .and_then(|c| c.addon_roles.as_mut())
    {
        roles.aws_node = aws_node.map(str::to_string);
    }
    let (minor, release) = test_release(&spec);
    let fixture =
        std::fs::read_to_string(data().join("addons/cni/amazon-vpc.yaml")).expect("fixture");
    addons::render(&spec, &release, &minor, Some(&fixture)).expect("renders")
}

/// With `addonRoles.awsNode`, the `aws-node` container of upstream's DaemonSet carries the projected
/// `amazonaws.com` token and `AWS_ROLE_ARN`/`AWS_WEB_IDENTITY_TOKEN_FILE` (rendered into the DaemonSet: aws-node
/// runs before the webhook could), beside its `CLUSTER_NAME`; its init container and the network-policy agent get
/// nothing; every other object of the set is unchanged. Without the role, the DaemonSet is upstream's plus
/// `CLUSTER_NAME` only. Golden: `tests/data/addons/irsa/aws-node.yaml`.
#[test]
fn aws_node_runs_on_its_role_with_a_projected_token() {
    let spec = spec("control-plane-irsa");
    let with = amazon_vpc(&spec, Some(AWS_NODE_ROLE));
    let without = amazon_vpc(&spec, None);
    let pod_with = pod(&with, AWS_NODE);
    let env = env_of(pod_with, "aws-node");
    assert!(env.contains(&("AWS_ROLE_ARN", AWS_NODE_ROLE)), "{env:?}");
    assert!(
        env.contains(&(
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "/var/run/secrets/amazonaws.com/token"
        )),
        "{env:?}"
    );
    assert!(
        env.contains(&("CLUSTER_NAME", "demo.example.com")),
        "{env:?}"
    );
    assert_eq!(
        env.iter().filter(|(n, _)| *n == "AWS_ROLE_ARN").count(),
        1,
        "{env:?}"
    );
    let volume = pod_with["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "aws-iam-token")
        .expect("the token volume");
    let projection = &volume["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(projection["audience"], "amazonaws.com");
    let mounted = pod_with["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "aws-node")
        .expect("aws-node")["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .any(|m| m["name"] == "aws-iam-token" && m["readOnly"] == true);
    assert!(mounted, "the token is mounted read-only into aws-node");
    assert!(env_of(pod_with, "aws-eks-nodeagent")
        .iter()
        .all(|(name, _)| !name.starts_with("AWS_ROLE") && !name.starts_with("AWS_WEB")));
    for init in pod_with["initContainers"].as_array().into_iter().flatten() {
        assert!(init["env"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| e["name"] != "AWS_ROLE_ARN"));
    }
    // Without the role: no token, no role; only aws-node's DaemonSet differs between the two sets.
    let pod_without = pod(&without, AWS_NODE);
    assert!(env_of(pod_without, "aws-node")
        .iter()
        .all(|(name, _)| !name.starts_with("AWS_ROLE") && !name.starts_with("AWS_WEB")));
    assert!(pod_without["volumes"]
        .as_array()
        .is_none_or(|v| v.iter().all(|v| v["name"] != "aws-iam-token")));
    assert_eq!(with.objects.len(), without.objects.len());
    for (a, b) in with.objects.iter().zip(&without.objects) {
        if a.describe() != AWS_NODE {
            assert_eq!(a, b, "{}", a.describe());
        }
    }
    let object = &with
        .objects
        .iter()
        .find(|o| o.describe() == AWS_NODE)
        .expect("aws-node")
        .value;
    assert_golden(
        &data().join("addons/irsa/aws-node.yaml"),
        format!(
            "# aws-node on its IRSA role (nodeup/tests/addons_irsa.rs), from the upstream-shaped fixture; image digests are TEST values.\n---\n{}",
            yaml_serde::to_string(object).expect("yaml")
        ),
    );
}

/// An unpinned image refuses only its own add-on: with the webhook's image unpinned (as the embedded manifest
/// has it) and every other image pinned, the applied set is exactly the set without the webhook (no webhook
/// object, its admission configuration included), and the refusal names the add-on, the image reference and
/// `images/pin.sh`. With its image pinned, nothing is refused.
#[test]
fn an_unpinned_webhook_image_refuses_the_webhook_alone() {
    let spec = spec("control-plane-irsa");
    let (minor, mut release) = test_release(&spec);
    let pinned = nodeup::addons::set::applied_set(render(&spec), &spec, &release, &minor, TEST_CA);
    assert!(pinned.1.is_empty(), "{:?}", pinned.1);
    assert!(pinned
        .0
        .objects
        .iter()
        .any(|o| o.addon == "pod-identity-webhook"));

    let webhook = release
        .addons
        .get_mut("pod-identity-webhook")
        .expect("the webhook's pins");
    let image = webhook
        .images
        .get_mut("pod-identity-webhook")
        .expect("its image");
    image.digest = ImageDigest::Unpinned;
    let reference = image.reference.clone();
    let base = render(&spec);
    let (set, refused) =
        nodeup::addons::set::applied_set(base.clone(), &spec, &release, &minor, TEST_CA);
    assert_eq!(set, base, "every other add-on is applied as rendered");
    assert!(set
        .objects
        .iter()
        .all(|o| o.addon != "pod-identity-webhook"));
    assert_eq!(set.versions.get("pod-identity-webhook"), None);
    let why = refused
        .get("pod-identity-webhook")
        .expect("the webhook refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    for part in [reference.as_str(), "images/pin.sh"] {
        assert!(why.contains(part), "{part} not in: {why}");
    }
}
