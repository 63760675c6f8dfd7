//! Does this AMI carry what the node spec needs? The image records what it installed at
//! `/etc/ballast/components.yaml` (written by `images/install.sh`); the node spec's Kubernetes version names a
//! release of the same manifest `ballast` reads (`images/manifest.yaml`, embedded in both binaries). A mismatch
//! stops the boot with every difference named in the log and the boot report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast_state::components::{
    ComponentManifest, ImageComponents, ImageRecordError, LookupError, ManifestError,
    IMAGE_RECORD_PATH,
};
use ballast_state::node::NodeSpec;

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageCheck {
    /// The image carries exactly the release's components; its record lists these images (reference -> the
    /// digest containerd's store holds it under).
    Matches(BTreeMap<String, String>),
    /// No record: not an image baked by Ballast's recipe (the local cloud's instances, say). Nothing to compare.
    NoRecord(PathBuf),
}

/// The image does not fit the node spec.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the AMI does not carry what the node spec needs (Kubernetes {version}): {}; bake an AMI for this \
             version (packer/) or set the group's spec.image to one", mismatches.join("; "))]
    Mismatch {
        version: String,
        mismatches: Vec<String>,
    },
    /// The image's record exists but cannot be read.
    #[error("{}: {source}", path.display())]
    UnreadableRecord {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The image's record does not parse.
    #[error("{0}")]
    BadRecord(#[source] ImageRecordError),
    /// The component manifest built into nodeup does not parse (a build that skipped its tests).
    #[error("the component manifest has no release for the node spec: {0}")]
    BadManifest(#[source] ManifestError),
    /// No release of the manifest fits the node spec's Kubernetes version.
    #[error("the component manifest has no release for the node spec: {0}")]
    NoRelease(#[source] LookupError),
}

/// Compares the image record under `root` with the release the node spec's Kubernetes version names.
pub fn check_image(root: &Path, spec: &NodeSpec) -> Result<ImageCheck, ImageError> {
    let path = root.join(IMAGE_RECORD_PATH.trim_start_matches('/'));
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ImageCheck::NoRecord(path))
        }
        Err(source) => return Err(ImageError::UnreadableRecord { path, source }),
    };
    let record = ImageComponents::parse(&text, &path.display().to_string())
        .map_err(ImageError::BadRecord)?;
    let manifest = ComponentManifest::embedded().map_err(ImageError::BadManifest)?;
    let (_, release) = manifest
        .release_for_minor(&spec.kubernetes_version)
        .map_err(ImageError::NoRelease)?;
    let mismatches: Vec<String> = record
        .mismatches(release)
        .iter()
        .map(ToString::to_string)
        .collect();
    if mismatches.is_empty() {
        for (name, component) in &record.components {
            if let Some(by) = &component.built_by {
                tracing::info!(component = %name, version = %component.version, built_by = %by,
                    "component built from source at the release's version: judged by its version");
            }
        }
        Ok(ImageCheck::Matches(record.images))
    } else {
        Err(ImageError::Mismatch {
            version: spec.kubernetes_version.clone(),
            mismatches,
        })
    }
}
