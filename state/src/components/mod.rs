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

pub mod addons;
mod image;
mod lookup;
mod manifest;
pub mod provenance;
mod validation;

pub use addons::{Addon, AddonManifest, ImageDigest, ManifestFormat, PinnedImage};
pub use image::{
    ImageComponents, ImageMismatch, ImageRecordError, InstalledComponent, InstalledFile,
};
pub use lookup::LookupError;
pub use manifest::{
    component_set, Archive, Component, ComponentManifest, ManifestError, Pin, Release, Sha256,
};
pub use provenance::{DigestKind, Provenance, ProvenanceKind};

/// `images/manifest.yaml`, as this build of Ballast was compiled with.
pub const MANIFEST_YAML: &str = include_str!("../../../images/manifest.yaml");
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

#[cfg(test)]
mod tests;
