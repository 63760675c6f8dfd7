//! The record of what an image carries, and how it differs from the release a node spec asks for.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::spec::API_VERSION;

use super::{Release, IMAGE_RECORD_KIND};

/// A record of an image's components that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: not a readable image record: {path}: {message}")]
pub struct ImageRecordError {
    pub source_name: String,
    pub path: String,
    pub message: String,
}

/// What an image carries: `/etc/ballast/components.yaml`, written by `images/install.sh`.
///
/// ```yaml
/// apiVersion: ballast.dev/v1alpha1
/// kind: ImageComponents
/// kubernetesMinor: "1.33"
/// kubernetes: "1.33.4"
/// manifestSha256: "<sha256 of the manifest file the image was baked from>"
/// bakedAt: "2025-09-01T12:00:00Z"
/// nodeup:
///   path: "/usr/local/bin/nodeup"
///   sha256: "<sha256 of the installed nodeup>"
/// components:
///   containerd:
///     version: "2.1.4"
///     sha256: "<sha256 of the artifact, as verified at bake time>"
///     files:
///       "/usr/local/bin/containerd": "<sha256 of the installed file>"
/// images:
///   "registry.k8s.io/pause:3.10.1": "sha256:<digest of the image containerd's store holds>"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageComponents {
    pub api_version: String,
    pub kind: String,
    pub kubernetes_minor: String,
    pub kubernetes: String,
    pub manifest_sha256: String,
    pub baked_at: String,
    pub nodeup: InstalledFile,
    pub components: BTreeMap<String, InstalledComponent>,
    /// The images baked into containerd's store: reference (repository and tag) -> the digest it is stored
    /// under (`sha256:` and 64 hex digits). Absent from records of bakes that listed none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstalledFile {
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstalledComponent {
    pub version: String,
    /// The artifact's sha256, verified before anything was installed.
    pub sha256: String,
    /// Set when the artifact was built from source at the release's version rather than downloaded
    /// ([`crate::components::provenance::BUILD_GO`]: the local cloud's image). Its sha256 is then the build's,
    /// checked at the bake, and cannot equal the release's upstream artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_by: Option<String>,
    /// Installed path -> sha256 of the installed file.
    pub files: BTreeMap<String, String>,
}

/// One way an image differs from the release a node spec asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageMismatch {
    Kubernetes {
        image: String,
        wanted: String,
    },
    MissingComponent {
        name: String,
        wanted: String,
    },
    Version {
        name: String,
        image: String,
        wanted: String,
    },
    /// Same version, another artifact (only checked where the manifest is pinned).
    Artifact {
        name: String,
        image: String,
        wanted: String,
    },
}

impl fmt::Display for ImageMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageMismatch::Kubernetes { image, wanted } => write!(
                f,
                "the AMI was baked for Kubernetes {image}, the node spec wants {wanted}"
            ),
            ImageMismatch::MissingComponent { name, wanted } => write!(
                f,
                "the AMI carries no {name}, the node spec wants {name} {wanted}"
            ),
            ImageMismatch::Version {
                name,
                image,
                wanted,
            } => write!(
                f,
                "the AMI carries {name} {image}, the node spec wants {name} {wanted}"
            ),
            ImageMismatch::Artifact {
                name,
                image,
                wanted,
            } => write!(
                f,
                "the AMI's {name} artifact has sha256 {image}, the node spec pins {wanted}"
            ),
        }
    }
}

impl ImageComponents {
    /// Parses the record; `source_name` names it in errors (usually [`IMAGE_RECORD_PATH`]).
    pub fn parse(text: &str, source_name: &str) -> Result<Self, ImageRecordError> {
        let deserializer = yaml_serde::Deserializer::from_str(text);
        let record: ImageComponents =
            serde_path_to_error::deserialize(deserializer).map_err(|e| ImageRecordError {
                source_name: source_name.to_string(),
                path: e.path().to_string(),
                message: e.inner().to_string(),
            })?;
        let wrong = |path: &str, message: String| ImageRecordError {
            source_name: source_name.to_string(),
            path: path.to_string(),
            message,
        };
        if record.api_version != API_VERSION {
            return Err(wrong(
                "apiVersion",
                format!("{:?}, expected {API_VERSION:?}", record.api_version),
            ));
        }
        if record.kind != IMAGE_RECORD_KIND {
            return Err(wrong(
                "kind",
                format!("{:?}, expected {IMAGE_RECORD_KIND:?}", record.kind),
            ));
        }
        for (reference, digest) in &record.images {
            let hex = digest.strip_prefix("sha256:").unwrap_or_default();
            if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(wrong(
                    &format!("images.{reference}"),
                    format!("{digest:?} is not sha256: and 64 lowercase hex digits"),
                ));
            }
        }
        Ok(record)
    }

    /// Every difference between this image and `wanted`, the release a node spec names. Empty: the image fits.
    pub fn mismatches(&self, wanted: &Release) -> Vec<ImageMismatch> {
        let mut found = Vec::new();
        if self.kubernetes != wanted.kubernetes {
            found.push(ImageMismatch::Kubernetes {
                image: self.kubernetes.clone(),
                wanted: wanted.kubernetes.clone(),
            });
        }
        for (name, component) in &wanted.components {
            match self.components.get(name) {
                None => found.push(ImageMismatch::MissingComponent {
                    name: name.clone(),
                    wanted: component.version.clone(),
                }),
                Some(installed) if installed.version != component.version => {
                    found.push(ImageMismatch::Version {
                        name: name.clone(),
                        image: installed.version.clone(),
                        wanted: component.version.clone(),
                    })
                }
                // Built from source at the release's version: the version is what the node spec needs; the upstream
                // artifact's hash does not apply to another build of it.
                Some(installed)
                    if installed.built_by.as_deref()
                        == Some(crate::components::provenance::BUILD_GO) => {}
                Some(installed) => {
                    if let Some(pinned) = component.sha256.pinned() {
                        if installed.sha256 != pinned {
                            found.push(ImageMismatch::Artifact {
                                name: name.clone(),
                                image: installed.sha256.clone(),
                                wanted: pinned.to_string(),
                            });
                        }
                    }
                }
            }
        }
        found
    }
}
