//! The cluster add-ons a control-plane node applies once its local API server answers (docs/addons.md).
//!
//! - [`set`] (pure): the add-on set of a node spec's release and networking: Ballast's own typed objects
//!   ([`objects`]: CoreDNS, kube-proxy unless the CNI replaces it, the AWS cloud controller manager, the
//!   certificate-rotation binding; [`cilium`]: Cilium; [`ebs_csi`]: the EBS CSI driver and the default
//!   StorageClass; [`pod_identity_webhook`]: the Pod Identity Webhook, with IAM roles for service accounts;
//!   [`cluster_autoscaler`]: the cluster autoscaler, when the node spec turns it on) and,
//!   for amazon-vpc and calico, the CNI's objects parsed from its baked upstream manifest
//!   ([`cni`]), every image pinned by digest (`images/manifest.yaml`).
//! - [`apply`] (I/O): server-side apply through `kube`, field manager `ballast`, conflicts retried with a
//!   bounded backoff; an object whose applied hash annotation already matches is left alone, so a second run
//!   writes nothing and two control-plane nodes racing write the same bytes.
//! - [`runner`] (I/O): on a configured control-plane node, waits for the local API server, renders, applies, and
//!   records the outcome in the node's report (`addons`).

pub mod apply;
pub mod cilium;
pub mod cluster_autoscaler;
pub mod cni;
pub mod ebs_csi;
pub mod objects;
pub mod pod_identity_webhook;
pub mod runner;
pub mod set;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use set::{aws_endpoints, render, with_aws_endpoints, AddonSet};

/// The field manager of every object Ballast applies.
pub const FIELD_MANAGER: &str = "ballast";
/// The annotation holding the sha256 of the object as Ballast last applied it.
pub const APPLIED_HASH_ANNOTATION: &str = "ballast.dev/applied-sha256";

/// One object to apply, as JSON, with the add-on it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct AddonObject {
    pub addon: String,
    pub value: Value,
}

impl AddonObject {
    pub fn new(addon: &str, value: Value) -> Self {
        AddonObject {
            addon: addon.to_string(),
            value,
        }
    }

    fn field(&self, pointer: &str) -> &str {
        self.value
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    pub fn api_version(&self) -> &str {
        self.field("/apiVersion")
    }

    pub fn kind(&self) -> &str {
        self.field("/kind")
    }

    pub fn name(&self) -> &str {
        self.field("/metadata/name")
    }

    pub fn namespace(&self) -> Option<&str> {
        self.value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }

    /// `Kind namespace/name` (or `Kind name`), for errors and the report.
    pub fn describe(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{} {ns}/{}", self.kind(), self.name()),
            None => format!("{} {}", self.kind(), self.name()),
        }
    }

    /// sha256 (hex) of the object's JSON: what the applied-hash annotation records. serde_json's maps are
    /// sorted, so the same object always hashes the same.
    pub fn content_sha256(&self) -> String {
        hex::encode(Sha256::digest(self.value.to_string().as_bytes()))
    }
}

/// Why the add-on set cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum AddonError {
    #[error("the node's Kubernetes version has no pinned add-ons: {0}")]
    UnknownRelease(#[source] ballast_state::components::LookupError),
    #[error("images/manifest.yaml pins no add-on {addon:?} for Kubernetes {minor}: bake an AMI from a manifest that does")]
    AddonNotPinned { addon: String, minor: String },
    #[error("images/manifest.yaml pins no image {image:?} of add-on {addon:?} for Kubernetes {minor}: bake an AMI from a manifest that does")]
    ImageNotPinned {
        addon: String,
        image: String,
        minor: String,
    },
    #[error("add-on {addon}: image {image} ({reference}) has no pinned digest in images/manifest.yaml: pin it with images/pin.sh (on a machine that reaches its registry) and bake a new AMI")]
    ImageUnpinned {
        addon: String,
        image: String,
        reference: String,
    },
    #[error("add-on {addon}: its manifest is not on this image (expected at {path}); bake an AMI with images/install.sh, which puts it there")]
    ManifestMissing { addon: String, path: String },
    #[error("add-on {addon}: manifest document {document} is not YAML: {source}")]
    ManifestUnreadable {
        addon: String,
        document: usize,
        #[source]
        source: yaml_serde::Error,
    },
    #[error("add-on {addon}: manifest document {document} has no {field}")]
    ManifestObjectIncomplete {
        addon: String,
        document: usize,
        field: &'static str,
    },
    /// An object Ballast must adjust is not in the manifest (so the add-on could not work under its settings).
    #[error("add-on {addon}: the manifest has no {what}")]
    ManifestObjectMissing { addon: String, what: &'static str },
    #[error("add-on {addon}: the manifest holds no object")]
    ManifestEmpty { addon: String },
    #[error("add-on {addon}: {object} runs image {image}, which images/manifest.yaml does not pin for it (so the AMI does not carry it); pin it under the add-on's images")]
    ManifestImageNotPinned {
        addon: String,
        object: String,
        image: String,
    },
    #[error("add-on {addon}: serializing {object}: {source}")]
    Serialize {
        addon: String,
        object: String,
        #[source]
        source: serde_json::Error,
    },
}
