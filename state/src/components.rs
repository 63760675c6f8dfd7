//! The components baked into Ballast's AMI, pinned per Kubernetes minor version (`images/manifest.yaml`, embedded
//! here), and the record of what an image actually carries (`/etc/ballast/components.yaml`, written by
//! `images/install.sh` at bake time).
//!
//! `ballast` puts the [`Release`] for a cluster's Kubernetes version into its node specs; `nodeup` reads the
//! image's [`ImageComponents`] at boot and reports every [`ImageMismatch`] between the two, so a node booted
//! from the wrong AMI says so plainly instead of failing somewhere in the kubelet.
//!
//! Pure: no I/O. The shell side (`images/lib.sh`) reads the same manifest with a small awk parser, which is why
//! [`ComponentManifest::parse`] also refuses YAML that parser cannot read (lists, flow style, anchors, ...).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::spec::API_VERSION;

/// `images/manifest.yaml`, as this build of Ballast was compiled with.
pub const MANIFEST_YAML: &str = include_str!("../../images/manifest.yaml");
/// What errors about the embedded manifest call it.
pub const MANIFEST_SOURCE: &str = "images/manifest.yaml";
pub const MANIFEST_KIND: &str = "ComponentManifest";
/// The record of what an image carries, written by `images/install.sh`.
pub const IMAGE_RECORD_PATH: &str = "/etc/ballast/components.yaml";
pub const IMAGE_RECORD_KIND: &str = "ImageComponents";
/// The value of `sha256` for an artifact nobody has hashed yet; `images/install.sh` refuses to install it.
pub const UNPINNED: &str = "unpinned";
/// Every component an image carries, each exactly once per release.
pub const COMPONENTS: [&str; 7] = [
    "containerd",
    "runc",
    "kubelet",
    "kubectl",
    "cni-plugins",
    "crictl",
    "etcd",
];
/// Components whose version must be the release's Kubernetes version.
const KUBERNETES_COMPONENTS: [&str; 2] = ["kubelet", "kubectl"];

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
    pub components: BTreeMap<String, Component>,
}

/// One pinned artifact and what is installed from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    pub version: String,
    pub url: String,
    pub sha256: Sha256,
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
#[derive(Debug, thiserror::Error)]
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
    #[error("Kubernetes {version}: {MANIFEST_SOURCE} pins {pinned} for {minor}, so Ballast's AMI carries {pinned}; \
             use kubernetesVersion {pinned}, or pin {version} in the manifest and bake a new AMI")]
    PatchMismatch {
        version: String,
        minor: String,
        pinned: String,
    },
}

/// A record of an image's components that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: not a readable image record: {path}: {message}")]
pub struct ImageRecordError {
    pub source_name: String,
    pub path: String,
    pub message: String,
}

/// `1.33.4` / `v1.33.4` / `1.33` -> (`1.33`, the patch if given).
fn split_version(version: &str) -> Option<(String, Option<String>)> {
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
    /// The manifest this build was compiled with. It is checked by this crate's tests, so an error here means
    /// the binary was built from a broken tree.
    pub fn embedded() -> Result<Self, ManifestError> {
        Self::parse(MANIFEST_YAML, MANIFEST_SOURCE)
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

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.api_version != API_VERSION {
            problems.push(format!(
                "apiVersion: {:?}, expected {API_VERSION:?}",
                self.api_version
            ));
        }
        if self.kind != MANIFEST_KIND {
            problems.push(format!("kind: {:?}, expected {MANIFEST_KIND:?}", self.kind));
        }
        if !matches!(self.arch.as_str(), "amd64" | "arm64") {
            problems.push(format!(
                "arch: {:?}, expected \"amd64\" or \"arm64\"",
                self.arch
            ));
        }
        if self.releases.is_empty() {
            problems.push("releases: none pinned".to_string());
        }
        for (minor, release) in &self.releases {
            release_problems(minor, release, &mut problems);
        }
        problems
    }
}

fn release_problems(minor: &str, release: &Release, problems: &mut Vec<String>) {
    let at = format!("releases.{minor:?}");
    match split_version(minor) {
        Some((m, None)) if m == minor => {}
        _ => problems.push(format!(
            "{at}: a release is keyed by a quoted minor version like \"1.33\""
        )),
    }
    match split_version(&release.kubernetes) {
        Some((m, Some(_))) if m == minor && !release.kubernetes.starts_with('v') => {}
        _ => problems.push(format!(
            "{at}.kubernetes: {:?} is not a {minor}.PATCH version",
            release.kubernetes
        )),
    }
    for name in COMPONENTS {
        if !release.components.contains_key(name) {
            problems.push(format!("{at}.components: {name} is missing"));
        }
    }
    let mut destinations: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, component) in &release.components {
        let at = format!("{at}.components.{name}");
        if !COMPONENTS.contains(&name.as_str()) {
            problems.push(format!(
                "{at}: unknown component (known: {})",
                COMPONENTS.join(", ")
            ));
        }
        if KUBERNETES_COMPONENTS.contains(&name.as_str()) && component.version != release.kubernetes
        {
            problems.push(format!(
                "{at}.version: {:?}, but the release is Kubernetes {}",
                component.version, release.kubernetes
            ));
        }
        if !shell_safe(&component.version) || component.version.is_empty() {
            problems.push(format!(
                "{at}.version: {:?} must be non-empty, without spaces or `|`",
                component.version
            ));
        }
        if !component.url.starts_with("https://") || !shell_safe(&component.url) {
            problems.push(format!(
                "{at}.url: {:?} must be an https:// URL without spaces or `|`",
                component.url
            ));
        }
        if let Some(command) = &component.version_command {
            if !command.starts_with('/') || command.contains('|') || command.contains('\t') {
                problems.push(format!(
                    "{at}.versionCommand: {command:?} must start with an absolute path and hold no `|` or tab"
                ));
            }
        }
        if component.files.is_empty() {
            problems.push(format!("{at}.files: nothing is installed from it"));
        }
        if component.archive == Archive::Binary
            && (component.files.len() != 1 || !component.files.contains_key(component.file_name()))
        {
            problems.push(format!(
                "{at}.files: a `binary` artifact installs exactly one file, keyed by the URL's file name {:?}",
                component.file_name()
            ));
        }
        for (from, to) in &component.files {
            if from.starts_with('/') || !clean_path(from) {
                problems.push(format!(
                    "{at}.files: {from:?} must be a relative path in the archive, without `..`, spaces or `|`"
                ));
            }
            if !to.starts_with('/') || !clean_path(to) {
                problems.push(format!(
                    "{at}.files.{from:?}: {to:?} must be an absolute path, without `..`, spaces or `|`"
                ));
            }
            if let Some(other) = destinations.insert(to, name) {
                problems.push(format!(
                    "{at}.files.{from:?}: {to:?} is installed by {other} too"
                ));
            }
        }
    }
}

fn shell_safe(value: &str) -> bool {
    !value
        .chars()
        .any(|c| c.is_whitespace() || c == '|' || c == '"' || c == '\'' || c == '\\')
}

fn clean_path(path: &str) -> bool {
    shell_safe(path)
        && !path.is_empty()
        && path
            .split('/')
            .all(|segment| segment != ".." && segment != ".")
}

/// What `images/lib.sh`'s awk reader cannot read: each problem with its line number.
fn shell_subset_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let content = line.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') || content == "---" {
            continue;
        }
        if content.starts_with('\t') || line.contains('\t') {
            problems.push(format!(
                "line {number}: tabs are not readable by images/install.sh"
            ));
        } else if content.starts_with('-') {
            problems.push(format!(
                "line {number}: lists are not readable by images/install.sh: use a mapping"
            ));
        } else if content
            .strip_suffix(':')
            .is_some_and(|key| split_version(key).is_some_and(|(_, patch)| patch.is_none()))
        {
            problems.push(format!(
                "line {number}: quote the minor version {content:?}: unquoted, YAML reads 1.30 as the number 1.3"
            ));
        } else if let Some((_, value)) = content.split_once(": ") {
            let value = value.trim();
            if value.starts_with(['{', '[', '&', '*', '|', '>', '!']) {
                problems.push(format!(
                    "line {number}: {value:?}: flow style, anchors, tags and block scalars are not readable by images/install.sh"
                ));
            }
        }
    }
    problems
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

/// The names of the components a release pins.
pub fn component_set(release: &Release) -> BTreeSet<&str> {
    release.components.keys().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded() -> ComponentManifest {
        match ComponentManifest::embedded() {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn the_embedded_manifest_is_valid_and_pins_the_default_version() {
        let manifest = embedded();
        assert!(manifest.minors().contains(&"1.32".to_string()));
        assert!(manifest.minors().contains(&"1.33".to_string()));
        let (minor, release) = manifest
            .release_exact(crate::defaults::DEFAULT_KUBERNETES_VERSION)
            .expect("the default Kubernetes version is pinned");
        assert_eq!(minor, "1.33");
        assert_eq!(
            release.kubernetes,
            crate::defaults::DEFAULT_KUBERNETES_VERSION
        );
        for minor in manifest.minors() {
            let release = &manifest.releases[&minor];
            assert_eq!(
                component_set(release),
                COMPONENTS.into_iter().collect::<BTreeSet<_>>()
            );
        }
    }

    #[test]
    fn the_embedded_manifest_says_honestly_that_it_is_unpinned() {
        // Nothing could be downloaded where this manifest was written: every hash is `unpinned`, never invented.
        // When a maintainer runs images/pin.sh, this test changes with the manifest.
        let manifest = embedded();
        let all = manifest
            .releases
            .values()
            .map(|r| r.components.len())
            .sum::<usize>();
        assert_eq!(manifest.unpinned().len(), all);
        assert!(manifest.unpinned().contains(&"1.33/kubelet".to_string()));
    }

    #[test]
    fn lookup_is_by_minor() {
        let manifest = embedded();
        for version in ["1.33", "1.33.0", "v1.33.4", "1.33.4"] {
            let (minor, _) = manifest.release_for_minor(version).expect(version);
            assert_eq!(minor, "1.33");
        }
        let (_, release) = manifest.release_for_minor("1.32").expect("1.32");
        assert!(release.kubernetes.starts_with("1.32."));
    }

    #[test]
    fn an_unknown_minor_lists_the_known_ones() {
        let manifest = embedded();
        let err = manifest.release_for_minor("1.29.1").expect_err("1.29");
        assert!(matches!(err, LookupError::UnknownMinor { .. }));
        let text = err.to_string();
        assert!(text.contains("Kubernetes 1.29"), "{text}");
        assert!(text.contains("1.32, 1.33"), "{text}");
    }

    #[test]
    fn a_version_that_is_not_one_is_named() {
        let manifest = embedded();
        for bad in ["", "1", "1.33.4.5", "one.two", "1.33-rc.1", "1..3"] {
            let err = manifest.release_for_minor(bad).expect_err(bad);
            assert!(
                matches!(err, LookupError::NotAVersion { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn release_exact_refuses_another_patch() {
        let manifest = embedded();
        let err = manifest.release_exact("1.33.1").expect_err("1.33.1");
        let text = err.to_string();
        assert!(matches!(err, LookupError::PatchMismatch { .. }));
        assert!(text.contains("pins 1.33.4 for 1.33"), "{text}");
        manifest
            .release_exact("1.33")
            .expect("a minor alone is fine");
    }

    const SMALL: &str = r#"apiVersion: ballast.dev/v1alpha1
kind: ComponentManifest
arch: amd64
releases:
  "1.33":
    kubernetes: 1.33.4
    components:
      containerd:
        version: 2.1.4
        url: https://example.com/containerd-2.1.4.tar.gz
        sha256: unpinned
        archive: tar.gz
        files:
          bin/containerd: /usr/local/bin/containerd
      runc:
        version: 1.3.0
        url: https://example.com/runc.amd64
        sha256: 0000000000000000000000000000000000000000000000000000000000000000
        archive: binary
        files:
          runc.amd64: /usr/local/sbin/runc
      kubelet:
        version: 1.33.4
        url: https://example.com/kubelet
        sha256: unpinned
        archive: binary
        versionCommand: /usr/local/bin/kubelet --version
        files:
          kubelet: /usr/local/bin/kubelet
      kubectl:
        version: 1.33.4
        url: https://example.com/kubectl
        sha256: unpinned
        archive: binary
        files:
          kubectl: /usr/local/bin/kubectl
      cni-plugins:
        version: 1.7.1
        url: https://example.com/cni.tgz
        sha256: unpinned
        archive: tar.gz
        files:
          loopback: /opt/cni/bin/loopback
      crictl:
        version: 1.33.0
        url: https://example.com/crictl.tar.gz
        sha256: unpinned
        archive: tar.gz
        files:
          crictl: /usr/local/bin/crictl
      etcd:
        version: 3.5.21
        url: https://example.com/etcd.tar.gz
        sha256: unpinned
        archive: tar.gz
        files:
          etcd/etcd: /usr/local/bin/etcd
"#;

    fn small() -> ComponentManifest {
        match ComponentManifest::parse(SMALL, "small.yaml") {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        }
    }

    fn problems_of(text: &str) -> Vec<String> {
        match ComponentManifest::parse(text, "bad.yaml") {
            Err(ManifestError::Invalid { problems, .. }) => problems,
            Err(e) => panic!("expected semantic problems, got: {e}"),
            Ok(_) => panic!("expected problems"),
        }
    }

    #[test]
    fn sha256_is_pinned_or_explicitly_unpinned() {
        let manifest = small();
        let release = &manifest.releases["1.33"];
        assert_eq!(release.components["containerd"].sha256, Sha256::Unpinned);
        assert!(release.components["runc"].sha256.pinned().is_some());

        let bad = SMALL.replace(
            "sha256: 0000000000000000000000000000000000000000000000000000000000000000",
            "sha256: 00000",
        );
        let err = ComponentManifest::parse(&bad, "bad.yaml").expect_err("short sha");
        let text = err.to_string();
        assert!(matches!(err, ManifestError::Malformed { .. }));
        assert!(
            text.contains("releases.1.33.components.runc.sha256"),
            "{text}"
        );
        assert!(text.contains("64 lowercase hex digits"), "{text}");

        let missing = SMALL.replace(
            "        sha256: 0000000000000000000000000000000000000000000000000000000000000000\n",
            "",
        );
        let err = ComponentManifest::parse(&missing, "bad.yaml").expect_err("no sha");
        assert!(err.to_string().contains("missing field `sha256`"), "{err}");
    }

    #[test]
    fn every_rule_is_reported_at_once() {
        let bad = SMALL
            .replace(
                "      kubectl:\n        version: 1.33.4",
                "      kubectl:\n        version: 1.33.3",
            )
            .replace(
                "          kubelet: /usr/local/bin/kubelet",
                "          kubelet: usr/local/bin/kubelet",
            )
            .replace(
                "          loopback: /opt/cni/bin/loopback",
                "          ../loopback: /usr/local/bin/crictl",
            )
            .replace(
                "https://example.com/runc.amd64",
                "http://example.com/runc.amd64",
            );
        let problems = problems_of(&bad);
        let all = problems.join("\n");
        assert!(
            all.contains(
                "components.kubectl.version: \"1.33.3\", but the release is Kubernetes 1.33.4"
            ),
            "{all}"
        );
        assert!(
            all.contains("\"usr/local/bin/kubelet\" must be an absolute path"),
            "{all}"
        );
        assert!(
            all.contains("\"../loopback\" must be a relative path"),
            "{all}"
        );
        assert!(
            all.contains("\"/usr/local/bin/crictl\" is installed by"),
            "{all}"
        );
        assert!(all.contains("components.runc.url"), "{all}");
        assert_eq!(problems.len(), 5, "{all}");
    }

    #[test]
    fn a_missing_or_unknown_component_is_named() {
        let bad = SMALL.replace("      crictl:\n", "      crictll:\n");
        let all = problems_of(&bad).join("\n");
        assert!(all.contains("components: crictl is missing"), "{all}");
        assert!(
            all.contains("components.crictll: unknown component"),
            "{all}"
        );
    }

    #[test]
    fn a_binary_installs_the_file_named_by_its_url() {
        let bad = SMALL.replace(
            "          kubectl: /usr/local/bin/kubectl",
            "          kctl: /usr/local/bin/kubectl",
        );
        let all = problems_of(&bad).join("\n");
        assert!(
            all.contains("keyed by the URL's file name \"kubectl\""),
            "{all}"
        );
    }

    #[test]
    fn yaml_the_shell_cannot_read_is_refused() {
        let bad = SMALL.replace(
            "        files:\n          crictl: /usr/local/bin/crictl",
            "        files: {crictl: /usr/local/bin/crictl}",
        );
        let all = problems_of(&bad).join("\n");
        assert!(all.contains("flow style"), "{all}");
        let unquoted = SMALL.replace("  \"1.33\":", "  1.33:");
        let all = problems_of(&unquoted).join("\n");
        assert!(all.contains("line 5: quote the minor version"), "{all}");
    }

    #[test]
    fn a_minor_key_must_match_its_kubernetes_version() {
        let bad = SMALL.replace("    kubernetes: 1.33.4", "    kubernetes: 1.32.4");
        let all = problems_of(&bad).join("\n");
        assert!(
            all.contains("releases.\"1.33\".kubernetes: \"1.32.4\" is not a 1.33.PATCH version"),
            "{all}"
        );
    }

    fn record_for(manifest: &ComponentManifest) -> String {
        let release = &manifest.releases["1.33"];
        let mut text = String::from(
            "apiVersion: ballast.dev/v1alpha1\nkind: ImageComponents\nkubernetesMinor: \"1.33\"\n\
             kubernetes: \"1.33.4\"\nmanifestSha256: \"abc\"\nbakedAt: \"2025-09-01T12:00:00Z\"\n\
             nodeup:\n  path: \"/usr/local/bin/nodeup\"\n  sha256: \"def\"\ncomponents:\n",
        );
        for (name, c) in &release.components {
            let sha = c.sha256.pinned().unwrap_or("1111");
            text.push_str(&format!(
                "  {name}:\n    version: \"{}\"\n    sha256: \"{sha}\"\n    files:\n",
                c.version
            ));
            for to in c.files.values() {
                text.push_str(&format!("      \"{to}\": \"2222\"\n"));
            }
        }
        text
    }

    #[test]
    fn a_matching_image_has_no_mismatch() {
        let manifest = small();
        let record =
            ImageComponents::parse(&record_for(&manifest), IMAGE_RECORD_PATH).expect("record");
        assert_eq!(
            record.components["containerd"].files["/usr/local/bin/containerd"],
            "2222"
        );
        assert_eq!(record.mismatches(&manifest.releases["1.33"]), vec![]);
    }

    #[test]
    fn every_mismatch_is_named() {
        let manifest = small();
        let text = record_for(&manifest)
            .replace("kubernetes: \"1.33.4\"", "kubernetes: \"1.32.8\"")
            .replace("    version: \"2.1.4\"", "    version: \"1.7.27\"")
            .replace(
                "0000000000000000000000000000000000000000000000000000000000000000",
                "9999",
            );
        let text = text.replace("  etcd:\n", "  etcd-old:\n");
        let record = ImageComponents::parse(&text, IMAGE_RECORD_PATH).expect("record");
        let found: Vec<String> = record
            .mismatches(&manifest.releases["1.33"])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            vec![
                "the AMI was baked for Kubernetes 1.32.8, the node spec wants 1.33.4",
                "the AMI carries containerd 1.7.27, the node spec wants containerd 2.1.4",
                "the AMI carries no etcd, the node spec wants etcd 3.5.21",
                "the AMI's runc artifact has sha256 9999, the node spec pins \
                 0000000000000000000000000000000000000000000000000000000000000000",
            ]
        );
    }

    #[test]
    fn a_record_of_another_kind_is_refused() {
        let manifest = small();
        let text = record_for(&manifest).replace("kind: ImageComponents", "kind: Cluster");
        let err = ImageComponents::parse(&text, IMAGE_RECORD_PATH).expect_err("kind");
        assert!(
            err.to_string()
                .contains("/etc/ballast/components.yaml: not a readable image record: kind"),
            "{err}"
        );
    }
}
