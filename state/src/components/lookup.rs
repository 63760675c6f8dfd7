//! Finding the release the manifest pins for a Kubernetes version.

use super::{ComponentManifest, Release, MANIFEST_SOURCE};

/// A Kubernetes version the manifest cannot answer for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("{version:?} is not a Kubernetes version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, like 1.33 or 1.33.4")]
    NotAVersion { version: String },
    #[error("no AMI components are pinned for Kubernetes {minor} (asked for {version}); {MANIFEST_SOURCE} pins: {}",
        known.join(", "))]
    UnknownMinor {
        version: String,
        minor: String,
        known: Vec<String>,
    },
    #[error("Kubernetes {minor} reached its end of life on {date}: a new cluster runs one of {} (the default is \
             {default}); {MANIFEST_SOURCE} keeps {minor} only so that a cluster at it can be upgraded from it, one \
             minor at a time", supported.join(", "))]
    EndOfLife {
        version: String,
        minor: String,
        date: String,
        supported: Vec<String>,
        default: String,
    },
    #[error("Kubernetes {version}: {MANIFEST_SOURCE} pins {pinned} for {minor}, so Ballast's AMI carries {pinned}; \
             use kubernetesVersion {pinned}, or pin {version} in the manifest and bake a new AMI")]
    PatchMismatch {
        version: String,
        minor: String,
        pinned: String,
    },
}

/// `1.33.4` / `v1.33.4` / `1.33` -> (`1.33`, the patch if given).
pub(super) fn split_version(version: &str) -> Option<(String, Option<String>)> {
    let trimmed = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = trimmed.split('.').collect();
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        [major, minor] if numeric(major) && numeric(minor) => {
            Some((format!("{major}.{minor}"), None))
        }
        [major, minor, patch] if numeric(major) && numeric(minor) && numeric(patch) => {
            Some((format!("{major}.{minor}"), Some(trimmed.to_string())))
        }
        _ => None,
    }
}

impl ComponentManifest {
    /// The minor versions pinned, oldest first (`1.32`, `1.33`, ...).
    pub fn minors(&self) -> Vec<String> {
        let mut minors: Vec<String> = self.releases.keys().cloned().collect();
        minors.sort_by_key(|m| {
            m.split('.')
                .map(|p| p.parse::<u64>().unwrap_or(0))
                .collect::<Vec<_>>()
        });
        minors
    }

    /// The minor versions a new cluster may run, oldest first: those not past their end of life.
    pub fn supported_minors(&self) -> Vec<String> {
        self.minors()
            .into_iter()
            .filter(|m| {
                self.releases
                    .get(m)
                    .is_some_and(|r| r.end_of_life.is_none())
            })
            .collect()
    }

    /// Why a new cluster may not run `version` (its release is pinned, as [`Self::release_exact`] checks, but
    /// past its end of life), naming what it may run; `None` when it may. `default` is the version a cluster
    /// gets when its spec names none.
    pub fn new_cluster_problem(&self, version: &str, default: &str) -> Option<LookupError> {
        let (minor, release) = self.release_for_minor(version).ok()?;
        let date = release.end_of_life.as_ref()?;
        Some(LookupError::EndOfLife {
            version: version.to_string(),
            minor: minor.to_string(),
            date: date.clone(),
            supported: self.supported_minors(),
            default: default.to_string(),
        })
    }

    /// The release for a Kubernetes version's minor (`1.33.2` and `1.33` both find `1.33`); returns the minor too.
    pub fn release_for_minor(&self, version: &str) -> Result<(&str, &Release), LookupError> {
        let (minor, _) = split_version(version).ok_or_else(|| LookupError::NotAVersion {
            version: version.to_string(),
        })?;
        self.releases
            .get_key_value(&minor)
            .map(|(k, r)| (k.as_str(), r))
            .ok_or_else(|| LookupError::UnknownMinor {
                version: version.to_string(),
                minor,
                known: self.minors(),
            })
    }

    /// The sandbox (pause) image the AMI of `version`'s release bakes, by tag (`registry.k8s.io/pause:3.10.1`):
    /// the one a node spec names to containerd. `None` for a minor the manifest does not pin.
    pub fn sandbox_image(&self, version: &str) -> Option<&str> {
        let (_, release) = self.release_for_minor(version).ok()?;
        release
            .addons
            .get(super::addons::PAUSE)?
            .images
            .get(super::addons::PAUSE)
            .map(|image| image.reference.as_str())
    }

    /// Like [`Self::release_for_minor`], and when `version` names a patch, it must be the one the manifest pins:
    /// the AMI carries exactly one kubelet per minor.
    pub fn release_exact(&self, version: &str) -> Result<(&str, &Release), LookupError> {
        let (minor, release) = self.release_for_minor(version)?;
        if let Some((_, Some(patch))) = split_version(version) {
            if patch != release.kubernetes {
                return Err(LookupError::PatchMismatch {
                    version: version.to_string(),
                    minor: minor.to_string(),
                    pinned: release.kubernetes.clone(),
                });
            }
        }
        Ok((minor, release))
    }
}
