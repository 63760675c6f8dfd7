//! The cluster add-ons pinned per release (`releases."1.33".addons` in `images/manifest.yaml`): the container
//! images of CoreDNS, kube-proxy, the AWS cloud controller manager, each CNI, the EBS CSI driver, the Pod Identity
//! Webhook and the cluster autoscaler, by tag and sha256 digest, and for
//! a CNI the upstream manifest it is installed from, by URL and sha256. The AMI bakes them (images/install.sh);
//! a control-plane node's nodeup applies them from the image, never downloading anything at boot.
//!
//! Pure: types and the rules they must follow. A digest nobody has obtained yet is `unpinned`, never invented;
//! the bake refuses it, and so does nodeup's rendering.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::provenance::{pin_problems, DigestKind, Provenance};
use super::{Sha256, UNPINNED};
use crate::spec::Networking;

/// CoreDNS: the cluster's DNS (Deployment and Service written by Ballast).
pub const COREDNS: &str = "coredns";
/// kube-proxy: the service proxy (DaemonSet written by Ballast), unless the CNI replaces it.
pub const KUBE_PROXY: &str = "kube-proxy";
/// The AWS cloud controller manager (DaemonSet on control-plane nodes, written by Ballast).
pub const AWS_CLOUD_CONTROLLER_MANAGER: &str = "aws-cloud-controller-manager";
/// The CNIs, one per `spec.networking` value, each installed from its pinned upstream manifest.
pub const AMAZON_VPC: &str = "amazon-vpc";
pub const CILIUM: &str = "cilium";
pub const CALICO: &str = "calico";
/// The EBS CSI driver (rendered by Ballast): without it no PersistentVolume works on AWS.
pub const AWS_EBS_CSI_DRIVER: &str = "aws-ebs-csi-driver";
/// The Amazon EKS Pod Identity Webhook (rendered by Ballast): gives pods of service accounts with an IAM role
/// their web-identity credentials; installed when `spec.serviceAccountIssuerDiscovery` creates the IAM OIDC
/// provider (docs/irsa.md).
pub const POD_IDENTITY_WEBHOOK: &str = "pod-identity-webhook";
/// The cluster autoscaler (rendered by Ballast, `nodeup/src/addons/cluster_autoscaler.rs`): installed on the
/// control plane when `spec.clusterAutoscaler.enabled`; it sizes the node groups tagged for it.
pub const CLUSTER_AUTOSCALER: &str = "cluster-autoscaler";
/// Not an add-on: the sandbox (pause) image containerd starts for every pod. Pinned and baked like the add-on
/// images, and named in containerd's configuration by nodeup, so no pod start pulls it.
pub const PAUSE: &str = "pause";
/// Every add-on a release with add-ons must pin (and the sandbox image, [`PAUSE`]).
pub const ADDONS: [&str; 10] = [
    COREDNS,
    KUBE_PROXY,
    AWS_CLOUD_CONTROLLER_MANAGER,
    AMAZON_VPC,
    CILIUM,
    CALICO,
    AWS_EBS_CSI_DRIVER,
    POD_IDENTITY_WEBHOOK,
    CLUSTER_AUTOSCALER,
    PAUSE,
];
/// The add-ons Ballast renders itself (typed objects), each running its one image.
pub const BALLAST_RENDERED: [&str; 5] = [
    COREDNS,
    KUBE_PROXY,
    AWS_CLOUD_CONTROLLER_MANAGER,
    POD_IDENTITY_WEBHOOK,
    CLUSTER_AUTOSCALER,
];
/// The CNIs installed from their upstream manifest, baked into the image. Cilium is not one: upstream publishes
/// a Helm chart, and Ballast renders Cilium's objects itself, as kops does (nodeup/src/addons/cilium.rs).
pub const FROM_UPSTREAM_MANIFEST: [&str; 2] = [AMAZON_VPC, CALICO];
/// The images Cilium's objects run: the agent (which also runs Envoy, embedded: docs/addons.md) and the
/// operator (`operator-generic`: no cloud IPAM).
pub const CILIUM_IMAGES: [&str; 2] = ["cilium", "operator"];
/// The images of the EBS CSI driver's objects: the driver itself and the sidecars kops runs beside it (no
/// csi-snapshotter: kops adds it only with a snapshot controller, which Ballast does not install).
pub const EBS_CSI_IMAGES: [&str; 6] = [
    "ebs-plugin",
    "csi-provisioner",
    "csi-attacher",
    "csi-resizer",
    "liveness-probe",
    "node-driver-registrar",
];
/// The add-ons whose objects Ballast renders and that run several images, each with exactly its images (and
/// their label in messages). The other add-ons Ballast renders run one image named like the add-on.
const RENDERED_IMAGES: [(&str, &str, &[&str]); 2] = [
    (CILIUM, "Cilium", &CILIUM_IMAGES),
    (AWS_EBS_CSI_DRIVER, "EBS CSI driver", &EBS_CSI_IMAGES),
];

/// The add-on name of the CNI `spec.networking` chooses; `None` for kubenet, which is the kubelet's and
/// containerd's own bridge, no add-on.
pub fn cni_addon(networking: Networking) -> Option<&'static str> {
    match networking {
        Networking::AmazonVpc => Some(AMAZON_VPC),
        Networking::Cilium => Some(CILIUM),
        Networking::Calico => Some(CALICO),
        Networking::Kubenet => None,
    }
}

/// Whether the CNI does kube-proxy's work itself, so kube-proxy is not installed. Ballast renders Cilium with
/// its kube-proxy replacement on (`kube-proxy-replacement: "true"`, docs/addons.md); the others need kube-proxy.
pub fn cni_replaces_kube_proxy(networking: Networking) -> bool {
    networking == Networking::Cilium
}

/// One add-on of a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Addon {
    /// The upstream version (no leading `v`).
    pub version: String,
    /// Name -> the image, as the add-on's objects reference it. Keyed by a short name, not a list, because
    /// images/lib.sh's reader takes mappings only.
    pub images: BTreeMap<String, PinnedImage>,
    /// For a CNI: the upstream manifest its objects are parsed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<AddonManifest>,
}

/// A container image: its tagged reference and the digest it must resolve to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PinnedImage {
    /// `registry/repository:tag`, without a digest.
    pub reference: String,
    pub digest: ImageDigest,
    /// What the digest names: an image index (manifest list) for an image upstream publishes for several
    /// platforms, else one manifest. Required beside a pinned digest; the bake checks the object it imports is
    /// of this kind (images/install.sh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_kind: Option<DigestKind>,
    /// Where a pinned digest was read (no provenance, no pin: [`super::provenance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Why an `unpinned` digest is not pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl PinnedImage {
    /// `registry/repository:tag@sha256:...`, what a pod spec names so the runtime cannot be handed another
    /// image under the same tag; `None` while the digest is unpinned.
    pub fn pinned_reference(&self) -> Option<String> {
        match &self.digest {
            ImageDigest::Pinned(hex) => Some(format!("{}@sha256:{hex}", self.reference)),
            ImageDigest::Unpinned => None,
        }
    }
}

/// An image's digest: `sha256:` and 64 lowercase hex digits, or `unpinned`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ImageDigest {
    /// The 64 hex digits (without `sha256:`).
    Pinned(String),
    Unpinned,
}

impl TryFrom<String> for ImageDigest {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        if value == UNPINNED {
            return Ok(ImageDigest::Unpinned);
        }
        match value
            .strip_prefix("sha256:")
            .map(|hex| Sha256::try_from(hex.to_string()))
        {
            Some(Ok(Sha256::Pinned(hex))) => Ok(ImageDigest::Pinned(hex)),
            _ => Err(format!(
                "{value:?} is not an image digest: expected sha256: and 64 lowercase hex digits, or `{UNPINNED}`"
            )),
        }
    }
}

impl From<ImageDigest> for String {
    fn from(value: ImageDigest) -> Self {
        value.to_string()
    }
}

impl fmt::Display for ImageDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageDigest::Pinned(hex) => write!(f, "sha256:{hex}"),
            ImageDigest::Unpinned => f.write_str(UNPINNED),
        }
    }
}

/// A CNI's upstream manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonManifest {
    pub url: String,
    pub sha256: Sha256,
    /// Where a pinned sha256 was read (no provenance, no pin: [`super::provenance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Why an `unpinned` sha256 is not pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub format: ManifestFormat,
}

/// What the manifest's download is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ManifestFormat {
    /// Multi-document Kubernetes YAML, applied as published.
    #[serde(rename = "yaml")]
    Yaml,
    /// A Helm chart. No add-on is installed from one: Cilium, which upstream publishes as a chart, is rendered
    /// by Ballast itself (nodeup/src/addons/cilium.rs), and the bake refuses a chart (no helm in the recipe).
    #[serde(rename = "helm-chart")]
    HelmChart,
}

/// Where an add-on's manifest is on the image, baked by images/install.sh.
pub fn baked_manifest_path(addon: &str) -> String {
    format!("/etc/ballast/addons/{addon}.yaml")
}

/// The problems of one release's add-ons (empty: none pinned, allowed for test manifests).
pub(super) fn addon_problems(
    at: &str,
    addons: &BTreeMap<String, Addon>,
    problems: &mut Vec<String>,
) {
    if addons.is_empty() {
        return;
    }
    for name in ADDONS {
        if !addons.contains_key(name) {
            problems.push(format!("{at}.addons: {name} is missing"));
        }
    }
    for (name, addon) in addons {
        let at = format!("{at}.addons.{name}");
        if !ADDONS.contains(&name.as_str()) {
            problems.push(format!(
                "{at}: unknown add-on (known: {})",
                ADDONS.join(", ")
            ));
        }
        if addon.version.is_empty() || addon.version.starts_with('v') || !plain(&addon.version) {
            problems.push(format!(
                "{at}.version: {:?} must be a version without a leading v, spaces or `|`",
                addon.version
            ));
        }
        if addon.images.is_empty() {
            problems.push(format!("{at}.images: none pinned"));
        }
        // The sandbox image is one image named like its entry, as the single-image add-ons are.
        if (BALLAST_RENDERED.contains(&name.as_str()) || name == PAUSE)
            && !addon.images.contains_key(name.as_str())
        {
            problems.push(format!(
                "{at}.images: Ballast's objects run the image named {name:?}, which is missing"
            ));
        }
        for (image_name, image) in &addon.images {
            let at = format!("{at}.images.{image_name}");
            if !image_reference_ok(&image.reference) {
                problems.push(format!(
                    "{at}.reference: {:?} must be registry/repository:tag, without a digest, spaces or `|`",
                    image.reference
                ));
            }
            let pinned = matches!(image.digest, ImageDigest::Pinned(_));
            pin_problems(
                &at,
                "digest",
                pinned,
                image.provenance.as_ref(),
                image.reason.as_deref(),
                problems,
            );
            if pinned && image.digest_kind.is_none() {
                problems.push(format!(
                    "{at}.digestKind: missing; say what the digest names: `index` (the manifest list of an image \
                     upstream publishes for several platforms) or `manifest` (one platform's image)"
                ));
            }
        }
        for (rendered, label, images) in RENDERED_IMAGES {
            if name != rendered {
                continue;
            }
            for image_name in images {
                if !addon.images.contains_key(*image_name) {
                    problems.push(format!(
                        "{at}.images: Ballast's {label} objects run the image named {image_name:?}, which is missing"
                    ));
                }
            }
            for image_name in addon.images.keys() {
                if !images.contains(&image_name.as_str()) {
                    problems.push(format!(
                        "{at}.images.{image_name}: no {label} object Ballast renders runs it, so the bake would \
                         carry it for nothing; remove it ({label} runs {})",
                        images.join(", ")
                    ));
                }
            }
        }
        if let Some(manifest) = &addon.manifest {
            pin_problems(
                &format!("{at}.manifest"),
                "sha256",
                manifest.sha256 != Sha256::Unpinned,
                manifest.provenance.as_ref(),
                manifest.reason.as_deref(),
                problems,
            );
        }
        // An unknown add-on is reported above; its manifest is not judged as well.
        let from_manifest =
            FROM_UPSTREAM_MANIFEST.contains(&name.as_str()) || !ADDONS.contains(&name.as_str());
        match (&addon.manifest, from_manifest) {
            (None, true) => problems.push(format!(
                "{at}.manifest: a CNI is installed from its upstream manifest; pin its url and sha256"
            )),
            (Some(_), false) => problems.push(format!(
                "{at}.manifest: Ballast writes this add-on's objects itself; remove the manifest"
            )),
            (Some(manifest), true)
                if !manifest.url.starts_with("https://") || !plain(&manifest.url) =>
            {
                problems.push(format!(
                    "{at}.manifest.url: {:?} must be an https:// URL without spaces or `|`",
                    manifest.url
                ))
            }
            _ => {}
        }
    }
}

fn plain(value: &str) -> bool {
    !value
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '|' | '"' | '\'' | '\\'))
}

/// `host/path:tag`: a registry host, a repository, a tag, and no digest (the digest is its own field).
fn image_reference_ok(reference: &str) -> bool {
    let Some((repository, tag)) = reference.rsplit_once(':') else {
        return false;
    };
    plain(reference)
        && !reference.contains('@')
        && repository.contains('/')
        && !tag.is_empty()
        && !tag.contains('/')
}
