//! The add-on applier's loop on a control-plane node (I/O): wait until the local API server answers, render
//! the set from the node spec, the embedded manifest's pins and the CNI manifest baked into the image, apply
//! it, and record the outcome in the node's report. Runs in the background for the life of nodeup; a failure
//! is reported and tried again later, never failing the boot.
//!
//! Its credentials: a client certificate for `ballast:addons` in `system:masters`, issued in memory from the
//! Kubernetes CA key this control-plane node already holds, valid for an hour, never written to disk or logged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ballast_state::addon_report::{AddonsReport, AddonsState};
use ballast_state::components::addons::{baked_manifest_path, cni_addon};
use ballast_state::components::{ComponentManifest, Release};
use ballast_state::node::NodeSpec;
use ballast_state::report::NodeReport;
use base64::Engine;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
use time::OffsetDateTime;

use super::apply::{apply_set, ObjectAction};
use super::set::applied_set;
use super::{render, AddonError};

/// The applier's identity in the API server's audit log.
pub const CLIENT_COMMON_NAME: &str = "ballast:addons";
const CLIENT_VALIDITY: time::Duration = time::Duration::hours(1);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the control-plane label is tried again while the node is not registered.
const LABEL_RETRY: Duration = Duration::from_secs(2);
/// The label of a control-plane node (what its add-ons select).
const CONTROL_PLANE_ROLE: &str = super::objects::CONTROL_PLANE_LABEL;

/// What the applier needs, taken from a configured control-plane node. Cloned for the termination handler,
/// which drains nodes with the same kind of client ([`AddonJob::client`]).
#[derive(Clone)]
pub struct AddonJob {
    pub root: PathBuf,
    pub spec: NodeSpec,
    /// `https://<private IP>:443`.
    pub api_server: String,
    pub ca_cert_pem: String,
    ca_key_pem: String,
    /// The images the AMI holds (its record's `images`): the add-ons name them by the digests stored.
    pub baked_images: BTreeMap<String, String>,
    /// This node's name (its private DNS name), which the job labels a control-plane node.
    pub node_name: String,
    /// The AWS endpoint overrides of nodeup's environment, handed to the cloud controller manager.
    pub aws_endpoints: BTreeMap<String, String>,
}

// By hand, so the CA key never reaches a log.
impl std::fmt::Debug for AddonJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddonJob")
            .field("root", &self.root)
            .field("api_server", &self.api_server)
            .field("ca_key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Why one round of the applier failed.
#[derive(Debug, thiserror::Error)]
pub enum AddonRunError {
    #[error("issuing the applier's client certificate: {0}")]
    Credentials(#[source] rcgen::Error),
    #[error("building the API client for {api_server}: {source}")]
    Client {
        api_server: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the embedded component manifest: {0}")]
    Manifest(#[source] ballast_state::components::ManifestError),
    #[error("reading {path}: {source}")]
    ReadManifest {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Render(#[from] AddonError),
    #[error(transparent)]
    Apply(#[from] super::apply::ApplyError),
    #[error("labelling node {node}: {source}")]
    Label {
        node: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl AddonJob {
    pub fn new(
        root: &Path,
        spec: NodeSpec,
        private_ip: &str,
        ca_cert_pem: &str,
        ca_key_pem: &str,
        baked_images: BTreeMap<String, String>,
        node_name: &str,
    ) -> Self {
        AddonJob {
            root: root.to_path_buf(),
            spec,
            api_server: format!(
                "https://{private_ip}:{}",
                crate::render::control_plane::API_SERVER_PORT
            ),
            ca_cert_pem: ca_cert_pem.to_string(),
            ca_key_pem: ca_key_pem.to_string(),
            baked_images,
            node_name: node_name.to_string(),
            aws_endpoints: super::aws_endpoints(std::env::vars()),
        }
    }

    /// Until the set is applied: probe, render, apply; `publish` gets every new report section.
    pub async fn run<F, Fut>(self, mut publish: F)
    where
        F: FnMut(AddonsReport) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        tokio::spawn(self.clone().label_control_plane_node());
        let mut pauses = crate::retry::ADDON_ROUNDS.pauses();
        // The last failure published: the same one again is not written again (one store write per change).
        let mut last_failure: Option<String> = None;
        loop {
            match self.round().await {
                Ok(Some(report)) => {
                    tracing::info!(summary = %report.summary(), "add-ons");
                    publish(report).await;
                    return;
                }
                // The API server is not up (yet): nothing to report beyond the waiting state set at boot.
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("add-ons: {e}");
                    let detail = crate::report::error_lines(&e).join(": ");
                    if last_failure.as_deref() != Some(detail.as_str()) {
                        let mut report = AddonsReport::waiting(&self.api_server, &now());
                        report.state = AddonsState::Failed;
                        report.detail = Some(detail.clone());
                        publish(report).await;
                        last_failure = Some(detail);
                    }
                }
            }
            if let Some(pause) = pauses.next() {
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// Labels this node `node-role.kubernetes.io/control-plane` once its kubelet has registered it, retrying until
    /// it has. The kubelet may not set that label itself (NodeRestriction keeps `node-role.kubernetes.io/*` from
    /// kubelets, so no worker can claim it), and what runs only on the control plane selects it: the cloud
    /// controller manager, the Pod Identity Webhook, the cluster autoscaler.
    async fn label_control_plane_node(self) {
        loop {
            match self.label_once().await {
                Ok(true) => {
                    tracing::info!(node = %self.node_name, "labelled {CONTROL_PLANE_ROLE}");
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::debug!(node = %self.node_name, "labelling the node: {e}"),
            }
            tokio::time::sleep(LABEL_RETRY).await;
        }
    }

    /// `false` while the node is not registered (or the API does not answer).
    async fn label_once(&self) -> Result<bool, AddonRunError> {
        let client = self.client().await?;
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        let patch = serde_json::json!({"metadata": {"labels": {CONTROL_PLANE_ROLE: ""}}});
        match nodes
            .patch(
                &self.node_name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(source) => Err(AddonRunError::Label {
                node: self.node_name.clone(),
                source: Box::new(source),
            }),
        }
    }

    /// One attempt with the embedded manifest's pins: `None` while the API does not answer.
    async fn round(&self) -> Result<Option<AddonsReport>, AddonRunError> {
        let client = self.client().await?;
        let manifest = ComponentManifest::embedded().map_err(AddonRunError::Manifest)?;
        let (minor, release) = manifest
            .release_exact(&self.spec.kubernetes_version)
            .map_err(|e| AddonRunError::Render(AddonError::UnknownRelease(e)))?;
        self.apply_once(&client, release, minor).await
    }

    /// One attempt through `client` with `release`'s pins: `None` while the API does not answer `/version`;
    /// else the set rendered from the node spec and the CNI manifest baked under the node's root, applied.
    pub async fn apply_once(
        &self,
        client: &Client,
        release: &Release,
        minor: &str,
    ) -> Result<Option<AddonsReport>, AddonRunError> {
        if tokio::time::timeout(REQUEST_TIMEOUT, client.apiserver_version())
            .await
            .map_or(true, |r| r.is_err())
        {
            return Ok(None);
        }
        let on_node = cni_addon(self.spec.networking).map(|cni| {
            self.root
                .join(baked_manifest_path(cni).trim_start_matches('/'))
        });
        let text = match on_node.as_ref().map(std::fs::read_to_string) {
            None => None,
            Some(Ok(text)) => Some(text),
            Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
            Some(Err(source)) => {
                return Err(AddonRunError::ReadManifest {
                    path: on_node.map(|p| p.display().to_string()).unwrap_or_default(),
                    source,
                })
            }
        };
        let release = &release.as_baked(&self.baked_images);
        let set = render(&self.spec, release, minor, text.as_deref())?;
        // An add-on that cannot render alone (an unpinned image of the EBS CSI driver, the webhook or the
        // autoscaler) is refused by name; the rest applies.
        let (set, mut refused) = applied_set(set, &self.spec, release, minor, &self.ca_cert_pem);
        refused.extend(set.refused.clone());
        let set = super::with_aws_endpoints(set, &self.aws_endpoints);
        for (addon, why) in &refused {
            tracing::warn!("add-on {addon} refused: {why}");
        }
        let outcomes = apply_set(client, &set, crate::retry::ADDON_APPLY).await?;
        Ok(Some(AddonsReport {
            state: AddonsState::Applied,
            api_server: self.api_server.clone(),
            versions: set.versions.clone(),
            set_sha256: Some(set.sha256()),
            objects: outcomes.len(),
            applied: outcomes
                .iter()
                .filter(|o| o.action == ObjectAction::Applied)
                .count(),
            updated_at: now(),
            detail: None,
            refused,
        }))
    }

    pub(crate) async fn client(&self) -> Result<Client, AddonRunError> {
        let (cert, key) = client_certificate(&self.ca_cert_pem, &self.ca_key_pem)
            .map_err(AddonRunError::Credentials)?;
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let kubeconfig = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": self.api_server,
                "certificate-authority-data": b64(&self.ca_cert_pem)}}],
            "users": [{"name": "ballast-addons", "user": {
                "client-certificate-data": b64(&cert),
                "client-key-data": b64(&key)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "ballast-addons"}}],
            "current-context": "local",
        });
        let client_error =
            |source: Box<dyn std::error::Error + Send + Sync>| AddonRunError::Client {
                api_server: self.api_server.clone(),
                source,
            };
        let kubeconfig: Kubeconfig =
            serde_json::from_value(kubeconfig).map_err(|e| client_error(Box::new(e)))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| client_error(Box::new(e)))?;
        config.read_timeout = Some(REQUEST_TIMEOUT);
        config.connect_timeout = Some(REQUEST_TIMEOUT);
        Client::try_from(config).map_err(|e| client_error(Box::new(e)))
    }
}

/// A one-hour client certificate for [`CLIENT_COMMON_NAME`] in `system:masters`: (certificate PEM, key PEM).
fn client_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
) -> Result<(String, String), rcgen::Error> {
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, CLIENT_COMMON_NAME);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + CLIENT_VALIDITY;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn now() -> String {
    crate::report::now_rfc3339()
}

/// The report with the add-ons section replaced.
pub fn with_addons(report: &NodeReport, addons: AddonsReport) -> NodeReport {
    let mut report = report.clone();
    report.addons = Some(addons);
    report
}
