//! The manifest's types, how it is parsed, and what it pins.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use super::addons::Addon;
use super::provenance::Provenance;
use super::validation::shell_subset_problems;
use super::{MANIFEST_SOURCE, MANIFEST_YAML, UNPINNED};

/// The manifest: per Kubernetes minor version (`"1.33"`), the components to bake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentManifest {
    pub api_version: String,
    pub kind: String,
    /// `amd64` (or `arm64`): the architecture every URL of this manifest is for.
    pub arch: String,
    pub releases: BTreeMap<String, Release>,
}

/// The components pinned for one Kubernetes minor version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Release {
    /// The full Kubernetes version the image carries for this minor: `1.33.4`.
    pub kubernetes: String,
    /// The day upstream support for this minor ended (`YYYY-MM-DD`), on a release kept only so that clusters
    /// at it can be upgraded from it: no new cluster is created at it ([`ComponentManifest::new_cluster_problem`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_of_life: Option<String>,
    pub components: BTreeMap<String, Component>,
    /// The cluster add-ons of this release (CoreDNS, kube-proxy, the cloud controller manager, each CNI). Empty
    /// only in test manifests: the embedded manifest pins every add-on (see [`super::addons`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub addons: BTreeMap<String, Addon>,
}

impl Release {
    /// This release as an AMI that bakes `baked` carries it: each add-on image the AMI holds (reference ->
    /// `sha256:<hex>`, its record's `images`) named by the digest it is stored under. For an AMI baked from the
    /// pins nothing changes (install.sh stores each image under its pin); on the local cloud's image, built here,
    /// its images have their build's digests, and an image upstream publishes no digest for becomes runnable.
    pub fn as_baked(&self, baked: &BTreeMap<String, String>) -> Release {
        let mut release = self.clone();
        for addon in release.addons.values_mut() {
            for image in addon.images.values_mut() {
                if let Some(hex) = baked
                    .get(&image.reference)
                    .and_then(|d| d.strip_prefix("sha256:"))
                {
                    image.digest = super::addons::ImageDigest::Pinned(hex.to_string());
                }
            }
        }
        release
    }
}

/// One pinned artifact and what is installed from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    pub version: String,
    pub url: String,
    pub sha256: Sha256,
    /// Where a pinned sha256 was read (no provenance, no pin: [`super::provenance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Why an `unpinned` sha256 is not pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub archive: Archive,
    /// Run on the image by `images/verify.sh`; its output must contain `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_command: Option<String>,
    /// Path in the archive (for [`Archive::Binary`], the URL's file name) -> absolute install path.
    pub files: BTreeMap<String, String>,
}

impl Component {
    /// The URL's last path segment: the file name an offline artifact directory holds it under.
    pub fn file_name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or(&self.url)
    }
}

/// An artifact's sha256: pinned (64 lowercase hex digits) or explicitly not yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Sha256 {
    Pinned(String),
    /// Written `unpinned`: nobody has downloaded and hashed the artifact yet (`images/pin.sh` does).
    Unpinned,
}

impl Sha256 {
    pub fn pinned(&self) -> Option<&str> {
        match self {
            Sha256::Pinned(hex) => Some(hex),
            Sha256::Unpinned => None,
        }
    }
}

impl TryFrom<String> for Sha256 {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        if value == UNPINNED {
            Ok(Sha256::Unpinned)
        } else if is_sha256(&value) {
            Ok(Sha256::Pinned(value))
        } else {
            Err(format!(
                "{value:?} is not a sha256: expected 64 lowercase hex digits, or `{UNPINNED}`"
            ))
        }
    }
}

impl From<Sha256> for String {
    fn from(value: Sha256) -> Self {
        value.to_string()
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sha256::Pinned(hex) => f.write_str(hex),
            Sha256::Unpinned => f.write_str(UNPINNED),
        }
    }
}

fn is_sha256(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// How an artifact is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Archive {
    /// The download is the executable itself.
    #[serde(rename = "binary")]
    Binary,
    #[serde(rename = "tar.gz")]
    TarGz,
}

/// A manifest that cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ManifestError {
    /// Not YAML of the manifest's shape (a wrong type, an unknown field, a sha256 that is not one).
    #[error("{source_name}: {path}: {message}")]
    Malformed {
        source_name: String,
        path: String,
        message: String,
    },
    /// Well-formed, but breaks the manifest's rules; every problem is listed.
    #[error("{source_name}: {} problem{} in the component manifest:\n  {}",
        problems.len(), if problems.len() == 1 { "" } else { "s" }, problems.join("\n  "))]
    Invalid {
        source_name: String,
        problems: Vec<String>,
    },
}

impl ComponentManifest {
    /// The manifest this build was compiled with, parsed once per process (a spec's validation asks for it
    /// several times). It is checked by this crate's tests, so an error here means the binary was built from a
    /// broken tree.
    pub fn embedded() -> Result<&'static Self, ManifestError> {
        static EMBEDDED: LazyLock<Result<ComponentManifest, ManifestError>> =
            LazyLock::new(|| ComponentManifest::parse(MANIFEST_YAML, MANIFEST_SOURCE));
        EMBEDDED.as_ref().map_err(Clone::clone)
    }

    /// Parses and validates a manifest; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, ManifestError> {
        let deserializer = yaml_serde::Deserializer::from_str(text);
        let manifest: ComponentManifest =
            serde_path_to_error::deserialize(deserializer).map_err(|e| {
                ManifestError::Malformed {
                    source_name: source_name.to_string(),
                    path: e.path().to_string(),
                    message: e.inner().to_string(),
                }
            })?;
        let mut problems = shell_subset_problems(text);
        problems.extend(manifest.problems());
        if problems.is_empty() {
            Ok(manifest)
        } else {
            Err(ManifestError::Invalid {
                source_name: source_name.to_string(),
                problems,
            })
        }
    }

    /// Every `minor/addon/image` digest and `minor/addon/manifest` sha256 still `unpinned`: the bake refuses
    /// each of them.
    pub fn unpinned_addons(&self) -> Vec<String> {
        let mut unpinned = Vec::new();
        for (minor, release) in &self.releases {
            for (name, addon) in &release.addons {
                for (image, pinned) in &addon.images {
                    if pinned.digest == super::addons::ImageDigest::Unpinned {
                        unpinned.push(format!("{minor}/{name}/{image}"));
                    }
                }
                if addon
                    .manifest
                    .as_ref()
                    .is_some_and(|m| m.sha256 == Sha256::Unpinned)
                {
                    unpinned.push(format!("{minor}/{name}/manifest"));
                }
            }
        }
        unpinned
    }

    /// Every `sha256` and image `digest` of the manifest, pinned or not, in manifest order per release (oldest
    /// release first): what docs/addons.md tabulates, and what the rule "no provenance, no pin" is held over.
    pub fn pins(&self) -> Vec<Pin<'_>> {
        let mut pins = Vec::new();
        for minor in self.minors() {
            let Some((minor, release)) = self.releases.get_key_value(&minor) else {
                continue;
            };
            for (name, component) in &release.components {
                pins.push(Pin {
                    minor,
                    name: format!("{name} {}", component.version),
                    value: component.sha256.to_string(),
                    pinned: component.sha256 != Sha256::Unpinned,
                    provenance: component.provenance.as_ref(),
                    reason: component.reason.as_deref(),
                });
            }
            for (name, addon) in &release.addons {
                if let Some(manifest) = &addon.manifest {
                    pins.push(Pin {
                        minor,
                        name: format!("{name} {} manifest", addon.version),
                        value: manifest.sha256.to_string(),
                        pinned: manifest.sha256 != Sha256::Unpinned,
                        provenance: manifest.provenance.as_ref(),
                        reason: manifest.reason.as_deref(),
                    });
                }
                for image in addon.images.values() {
                    pins.push(Pin {
                        minor,
                        name: image.reference.clone(),
                        value: image.digest.to_string(),
                        pinned: image.digest != super::addons::ImageDigest::Unpinned,
                        provenance: image.provenance.as_ref(),
                        reason: image.reason.as_deref(),
                    });
                }
            }
        }
        pins
    }

    /// Every `minor/component` whose sha256 is still `unpinned`.
    pub fn unpinned(&self) -> Vec<String> {
        self.releases
            .iter()
            .flat_map(|(minor, release)| {
                release
                    .components
                    .iter()
                    .filter(|(_, c)| c.sha256 == Sha256::Unpinned)
                    .map(move |(name, _)| format!("{minor}/{name}"))
            })
            .collect()
    }
}

/// One `sha256` or `digest` of the manifest ([`ComponentManifest::pins`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin<'a> {
    /// The release's minor version (`1.33`).
    pub minor: &'a str,
    /// What is pinned: `kubelet 1.33.4`, `calico 3.30.2 manifest`, or an image's tagged reference.
    pub name: String,
    /// The sha256 (hex) or digest (`sha256:...`), or `unpinned`.
    pub value: String,
    pub pinned: bool,
    pub provenance: Option<&'a Provenance>,
    pub reason: Option<&'a str>,
}

/// The names of the components a release pins.
pub fn component_set(release: &Release) -> BTreeSet<&str> {
    release.components.keys().map(String::as_str).collect()
}
