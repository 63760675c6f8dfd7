//! The cluster add-ons pinned per release (`releases."1.33".addons` in `images/manifest.yaml`): the container
//! images of CoreDNS, kube-proxy, the AWS cloud controller manager and each CNI, by tag and sha256 digest, and for
//! a CNI the upstream manifest it is installed from, by URL and sha256. The AMI bakes them (images/install.sh);
//! a control-plane node's nodeup applies them from the image, never downloading anything at boot.
//!
//! Pure: types and the rules they must follow. A digest nobody has obtained yet is `unpinned`, never invented;
//! the bake refuses it, and so does nodeup's rendering.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

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
/// Every add-on a release with add-ons must pin.
pub const ADDONS: [&str; 6] = [
    COREDNS,
    KUBE_PROXY,
    AWS_CLOUD_CONTROLLER_MANAGER,
    AMAZON_VPC,
    CILIUM,
    CALICO,
];
/// The add-ons Ballast renders itself (typed objects), each running its one image.
pub const BALLAST_RENDERED: [&str; 3] = [COREDNS, KUBE_PROXY, AWS_CLOUD_CONTROLLER_MANAGER];

/// The add-on name of the CNI `spec.networking` chooses.
pub fn cni_addon(networking: Networking) -> &'static str {
    match networking {
        Networking::AmazonVpc => AMAZON_VPC,
        Networking::Cilium => CILIUM,
        Networking::Calico => CALICO,
    }
}

/// Whether the CNI does kube-proxy's work itself, so kube-proxy is not installed. Cilium's manifest is rendered
/// with its kube-proxy replacement on (docs/addons.md); the others need kube-proxy.
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
    pub format: ManifestFormat,
}

/// What the manifest's download is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ManifestFormat {
    /// Multi-document Kubernetes YAML, applied as published.
    #[serde(rename = "yaml")]
    Yaml,
    /// A Helm chart, to be rendered with Ballast's values (docs/addons.md; part of it may have to be rendered
    /// on the node: Cilium without kube-proxy needs the API server's address). Not built: the bake refuses it,
    /// so a CNI published only as a chart cannot be baked yet.
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
        if BALLAST_RENDERED.contains(&name.as_str()) && !addon.images.contains_key(name.as_str()) {
            problems.push(format!(
                "{at}.images: Ballast's objects run the image named {name:?}, which is missing"
            ));
        }
        for (image_name, image) in &addon.images {
            if !image_reference_ok(&image.reference) {
                problems.push(format!(
                    "{at}.images.{image_name}.reference: {:?} must be registry/repository:tag, without a digest, spaces or `|`",
                    image.reference
                ));
            }
        }
        let is_cni = !BALLAST_RENDERED.contains(&name.as_str());
        match (&addon.manifest, is_cni) {
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
