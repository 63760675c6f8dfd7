//! The add-on set of a node spec (pure): which add-ons its release and networking install, at which versions,
//! and every object to apply, in apply order.

use std::collections::BTreeMap;

use ballast_state::components::addons::{
    self as pins, cni_addon, cni_replaces_kube_proxy, AWS_CLOUD_CONTROLLER_MANAGER,
    AWS_EBS_CSI_DRIVER, CILIUM, CLUSTER_AUTOSCALER, COREDNS, KUBE_PROXY, POD_IDENTITY_WEBHOOK,
};
use ballast_state::components::{Addon, Release};
use ballast_state::node::NodeSpec;
use ballast_state::spec::Networking;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::pod_identity_webhook::{
    pod_identity_webhook, PodIdentityWebhookConfig, ServiceAccountRole,
};
use super::{cilium, cluster_autoscaler, cni, ebs_csi, objects, AddonError, AddonObject};

/// Certificate rotation's binding belongs to no upstream add-on; it is named this in the report.
pub const NODE_RBAC: &str = "node-rbac";

/// What a control-plane node applies.
#[derive(Debug, Clone, PartialEq)]
pub struct AddonSet {
    /// Add-on -> its pinned version (`node-rbac` carries the release's Kubernetes version).
    pub versions: BTreeMap<String, String>,
    /// In apply order: namespaces and CRDs, then RBAC and accounts, then configuration, then workloads.
    pub objects: Vec<AddonObject>,
    /// Add-ons left out because they cannot render alone (an image the release does not pin and the AMI does
    /// not hold), each with why; the rest applies without them. Empty when every add-on renders.
    pub refused: BTreeMap<String, String>,
}

impl AddonSet {
    /// sha256 over every object's hash, in order: equal sets, equal hashes.
    pub fn sha256(&self) -> String {
        let mut hasher = Sha256::new();
        for object in &self.objects {
            hasher.update(object.content_sha256().as_bytes());
            hasher.update(b"\n");
        }
        hex::encode(hasher.finalize())
    }
}

/// The add-on set for `spec` from its release's pins. `cni_manifest` is the text of the CNI's baked manifest
/// (`None` when the image does not carry it: an error naming where it should be); Cilium, which Ballast renders
/// itself, needs none.
pub fn render(
    spec: &NodeSpec,
    release: &Release,
    minor: &str,
    cni_manifest: Option<&str>,
) -> Result<AddonSet, AddonError> {
    let addon = |name: &str| -> Result<&Addon, AddonError> {
        release
            .addons
            .get(name)
            .ok_or_else(|| AddonError::AddonNotPinned {
                addon: name.to_string(),
                minor: minor.to_string(),
            })
    };
    // The pinned reference of one image of an add-on.
    let image_of = |name: &str, key: &str| -> Result<String, AddonError> {
        let pinned = addon(name)?
            .images
            .get(key)
            .ok_or_else(|| AddonError::ImageNotPinned {
                addon: name.to_string(),
                image: key.to_string(),
                minor: minor.to_string(),
            })?;
        pinned
            .pinned_reference()
            .ok_or_else(|| AddonError::ImageUnpinned {
                addon: name.to_string(),
                image: key.to_string(),
                reference: pinned.reference.clone(),
            })
    };
    let image = |name: &str| image_of(name, name);
    let mut versions = BTreeMap::from([(NODE_RBAC.to_string(), release.kubernetes.clone())]);
    let mut out = Vec::new();
    push(
        &mut out,
        NODE_RBAC,
        &objects::certificate_rotation_binding(),
    )?;

    // kubenet is no add-on: the kubelet's and containerd's own bridge (nodeup renders its CNI template).
    if let Some(cni_name) = cni_addon(spec.networking) {
        let cni = addon(cni_name)?;
        cni_objects(
            &mut out,
            &mut versions,
            spec,
            (cni_name, cni),
            cni_manifest,
            &image_of,
        )?;
    }

    if !cni_replaces_kube_proxy(spec.networking) {
        let proxy = objects::kube_proxy(spec, &image(KUBE_PROXY)?);
        push(&mut out, KUBE_PROXY, &proxy.service_account)?;
        push(&mut out, KUBE_PROXY, &proxy.binding)?;
        push(&mut out, KUBE_PROXY, &proxy.config)?;
        push(&mut out, KUBE_PROXY, &proxy.daemon_set)?;
        versions.insert(KUBE_PROXY.to_string(), addon(KUBE_PROXY)?.version.clone());
    }

    let dns = objects::coredns(spec, &image(COREDNS)?);
    push(&mut out, COREDNS, &dns.service_account)?;
    push(&mut out, COREDNS, &dns.cluster_role)?;
    push(&mut out, COREDNS, &dns.binding)?;
    push(&mut out, COREDNS, &dns.config)?;
    push(&mut out, COREDNS, &dns.deployment)?;
    push(&mut out, COREDNS, &dns.service)?;
    versions.insert(COREDNS.to_string(), addon(COREDNS)?.version.clone());

    let ccm = objects::cloud_controller_manager(spec, &image(AWS_CLOUD_CONTROLLER_MANAGER)?);
    push(&mut out, AWS_CLOUD_CONTROLLER_MANAGER, &ccm.service_account)?;
    push(&mut out, AWS_CLOUD_CONTROLLER_MANAGER, &ccm.cluster_role)?;
    push(&mut out, AWS_CLOUD_CONTROLLER_MANAGER, &ccm.binding)?;
    push(
        &mut out,
        AWS_CLOUD_CONTROLLER_MANAGER,
        &ccm.authentication_reader,
    )?;
    push(&mut out, AWS_CLOUD_CONTROLLER_MANAGER, &ccm.daemon_set)?;
    versions.insert(
        AWS_CLOUD_CONTROLLER_MANAGER.to_string(),
        addon(AWS_CLOUD_CONTROLLER_MANAGER)?.version.clone(),
    );

    // The EBS CSI driver stands alone: an image of its that cannot be named refuses it, not the cluster's
    // network, DNS and cloud controller (the Pod Identity Webhook and the autoscaler likewise, `applied_set`).
    let ebs_images = (|| -> Result<ebs_csi::EbsCsiImages, AddonError> {
        Ok(ebs_csi::EbsCsiImages {
            ebs_plugin: image_of(AWS_EBS_CSI_DRIVER, "ebs-plugin")?,
            csi_provisioner: image_of(AWS_EBS_CSI_DRIVER, "csi-provisioner")?,
            csi_attacher: image_of(AWS_EBS_CSI_DRIVER, "csi-attacher")?,
            csi_resizer: image_of(AWS_EBS_CSI_DRIVER, "csi-resizer")?,
            liveness_probe: image_of(AWS_EBS_CSI_DRIVER, "liveness-probe")?,
            node_driver_registrar: image_of(AWS_EBS_CSI_DRIVER, "node-driver-registrar")?,
        })
    })();
    let mut refused = BTreeMap::new();
    match ebs_images {
        Ok(images) => ebs_objects(&mut out, &mut versions, spec, &images, &addon)?,
        Err(e @ (AddonError::ImageUnpinned { .. } | AddonError::ImageNotPinned { .. })) => {
            refused.insert(AWS_EBS_CSI_DRIVER.to_string(), e.to_string());
        }
        Err(e) => return Err(e),
    }

    // A stable sort: within a rank, the add-ons' own order stays.
    out.sort_by_key(|o| apply_rank(o.kind()));
    Ok(AddonSet {
        versions,
        objects: out,
        refused,
    })
}

/// The EBS CSI driver's objects with `images`.
fn ebs_objects<'r>(
    out: &mut Vec<AddonObject>,
    versions: &mut BTreeMap<String, String>,
    spec: &NodeSpec,
    images: &ebs_csi::EbsCsiImages,
    addon: &dyn Fn(&str) -> Result<&'r Addon, AddonError>,
) -> Result<(), AddonError> {
    let ebs = ebs_csi::ebs_csi(spec, images);
    push(out, AWS_EBS_CSI_DRIVER, &ebs.csi_driver)?;
    push(out, AWS_EBS_CSI_DRIVER, &ebs.storage_class)?;
    for account in &ebs.service_accounts {
        push(out, AWS_EBS_CSI_DRIVER, account)?;
    }
    for role in &ebs.cluster_roles {
        push(out, AWS_EBS_CSI_DRIVER, role)?;
    }
    for binding in &ebs.cluster_role_bindings {
        push(out, AWS_EBS_CSI_DRIVER, binding)?;
    }
    push(out, AWS_EBS_CSI_DRIVER, &ebs.disruption_budget)?;
    push(out, AWS_EBS_CSI_DRIVER, &ebs.controller)?;
    push(out, AWS_EBS_CSI_DRIVER, &ebs.node)?;
    versions.insert(
        AWS_EBS_CSI_DRIVER.to_string(),
        addon(AWS_EBS_CSI_DRIVER)?.version.clone(),
    );

    Ok(())
}

/// The objects of CNI add-on `cni_name` (`cni`, its pins): Cilium rendered by Ballast, the others from their
/// baked upstream manifests.
fn cni_objects(
    out: &mut Vec<AddonObject>,
    versions: &mut BTreeMap<String, String>,
    spec: &NodeSpec,
    (cni_name, cni): (&str, &Addon),
    cni_manifest: Option<&str>,
    image_of: &dyn Fn(&str, &str) -> Result<String, AddonError>,
) -> Result<(), AddonError> {
    if spec.networking == Networking::Cilium {
        let images = cilium::CiliumImages {
            agent: image_of(CILIUM, "cilium")?,
            operator: image_of(CILIUM, "operator")?,
        };
        let c = cilium::cilium(spec, &images);
        for account in &c.service_accounts {
            push(out, CILIUM, account)?;
        }
        for role in &c.cluster_roles {
            push(out, CILIUM, role)?;
        }
        for binding in &c.cluster_role_bindings {
            push(out, CILIUM, binding)?;
        }
        push(out, CILIUM, &c.role)?;
        push(out, CILIUM, &c.role_binding)?;
        push(out, CILIUM, &c.config)?;
        push(out, CILIUM, &c.disruption_budget)?;
        push(out, CILIUM, &c.daemon_set)?;
        push(out, CILIUM, &c.deployment)?;
    } else {
        let text = cni_manifest.ok_or_else(|| AddonError::ManifestMissing {
            addon: cni_name.to_string(),
            path: pins::baked_manifest_path(cni_name),
        })?;
        let mut cni_objects = cni::parse(cni_name, text, &cni.images)?;
        if spec.networking == Networking::AmazonVpc {
            cni::name_the_cluster_to_amazon_vpc(&mut cni_objects, &spec.cluster_name)?;
            if let Some(role) = objects::addon_role(spec, |r| &r.aws_node) {
                cni::run_amazon_vpc_on_web_identity(&mut cni_objects, role)?;
            }
        }
        out.extend(cni_objects);
    }
    versions.insert(cni_name.to_string(), cni.version.clone());
    Ok(())
}

/// The AWS SDKs' endpoint overrides in `vars` (nodeup's own environment): `AWS_ENDPOINT_URL` and the
/// per-service `AWS_ENDPOINT_URL_<SERVICE>`, set where the node reaches AWS another way (a VPC endpoint, FIPS,
/// the local cloud's link-local API). Empty on an instance that reaches AWS's public endpoints.
pub fn aws_endpoints(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.into_iter()
        .filter(|(name, value)| {
            (name == "AWS_ENDPOINT_URL" || name.starts_with("AWS_ENDPOINT_URL_"))
                && !value.is_empty()
        })
        .collect()
}

/// `set` with `endpoints` ([`aws_endpoints`]) in the cloud controller manager's environment, so it reaches AWS
/// as the node it runs on does (its SDK reads them); `set` as it is when there are none.
pub fn with_aws_endpoints(mut set: AddonSet, endpoints: &BTreeMap<String, String>) -> AddonSet {
    if endpoints.is_empty() {
        return set;
    }
    for object in &mut set.objects {
        if object.addon != AWS_CLOUD_CONTROLLER_MANAGER || object.kind() != "DaemonSet" {
            continue;
        }
        let Some(containers) = object
            .value
            .pointer_mut("/spec/template/spec/containers")
            .and_then(serde_json::Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            let env = container
                .entry("env")
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let Some(env) = env.as_array_mut() {
                env.retain(|e| {
                    !e["name"]
                        .as_str()
                        .is_some_and(|n| endpoints.contains_key(n))
                });
                env.extend(
                    endpoints
                        .iter()
                        .map(|(name, value)| serde_json::json!({"name": name, "value": value})),
                );
            }
        }
    }
    set
}

/// The Pod Identity Webhook's objects (IAM roles for service accounts), in apply order, with the release's pinned
/// image: its add-on version and objects, to be added to a cluster's set when the node spec turns it on.
pub fn pod_identity_webhook_set(
    release: &Release,
    minor: &str,
    config: &PodIdentityWebhookConfig,
) -> Result<AddonSet, AddonError> {
    let addon =
        release
            .addons
            .get(POD_IDENTITY_WEBHOOK)
            .ok_or_else(|| AddonError::AddonNotPinned {
                addon: POD_IDENTITY_WEBHOOK.to_string(),
                minor: minor.to_string(),
            })?;
    let pinned =
        addon
            .images
            .get(POD_IDENTITY_WEBHOOK)
            .ok_or_else(|| AddonError::ImageNotPinned {
                addon: POD_IDENTITY_WEBHOOK.to_string(),
                image: POD_IDENTITY_WEBHOOK.to_string(),
                minor: minor.to_string(),
            })?;
    let image = pinned
        .pinned_reference()
        .ok_or_else(|| AddonError::ImageUnpinned {
            addon: POD_IDENTITY_WEBHOOK.to_string(),
            image: POD_IDENTITY_WEBHOOK.to_string(),
            reference: pinned.reference.clone(),
        })?;
    let w = pod_identity_webhook(config, &image);
    let mut out = Vec::new();
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.service_account)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.role)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.cluster_role)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.role_binding)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.cluster_role_binding)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.config)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.service)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.disruption_budget)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.deployment)?;
    push(&mut out, POD_IDENTITY_WEBHOOK, &w.webhook)?;
    out.sort_by_key(|o| apply_rank(o.kind()));
    Ok(AddonSet {
        versions: BTreeMap::from([(POD_IDENTITY_WEBHOOK.to_string(), addon.version.clone())]),
        objects: out,
        refused: BTreeMap::new(),
    })
}

/// `set` with the Pod Identity Webhook added when the node spec turns it on (its `podIdentityWebhook`
/// settings, written by `update cluster` with IRSA's OIDC provider on); `set` as it is otherwise. The webhook's
/// `caBundle` is `ca_certificate_pem`, the Kubernetes CA that signs its serving certificate
/// (`crate::cert_plan::pod_identity_webhook`).
pub fn with_pod_identity_webhook(
    mut set: AddonSet,
    spec: &NodeSpec,
    release: &Release,
    minor: &str,
    ca_certificate_pem: &str,
) -> Result<AddonSet, AddonError> {
    let Some(control_plane) = spec.control_plane.as_ref() else {
        return Ok(set);
    };
    let Some(settings) = control_plane.pod_identity_webhook.as_ref() else {
        return Ok(set);
    };
    let config = PodIdentityWebhookConfig {
        region: settings.region.clone(),
        token_audience: settings.audience.clone(),
        ca_certificate_pem: ca_certificate_pem.to_string(),
        control_plane_nodes: control_plane.etcd.members.len().max(1),
        service_accounts: settings
            .service_accounts
            .iter()
            .map(|a| ServiceAccountRole {
                namespace: a.namespace.clone(),
                name: a.name.clone(),
                role_arn: a.role_arn.clone(),
            })
            .collect(),
    };
    let webhook = pod_identity_webhook_set(release, minor, &config)?;
    set.versions.extend(webhook.versions);
    set.objects.extend(webhook.objects);
    // Stable: the webhook's objects follow the others of their rank, its configuration still comes last.
    set.objects.sort_by_key(|o| apply_rank(o.kind()));
    Ok(set)
}

/// The cluster autoscaler's objects (`settings` from the control-plane node spec), in apply order, with the
/// release's pinned image: its add-on version and objects.
pub fn cluster_autoscaler_set(
    spec: &NodeSpec,
    settings: &ballast_state::autoscaler::ClusterAutoscalerSettings,
    release: &Release,
    minor: &str,
) -> Result<AddonSet, AddonError> {
    let addon =
        release
            .addons
            .get(CLUSTER_AUTOSCALER)
            .ok_or_else(|| AddonError::AddonNotPinned {
                addon: CLUSTER_AUTOSCALER.to_string(),
                minor: minor.to_string(),
            })?;
    let pinned =
        addon
            .images
            .get(CLUSTER_AUTOSCALER)
            .ok_or_else(|| AddonError::ImageNotPinned {
                addon: CLUSTER_AUTOSCALER.to_string(),
                image: CLUSTER_AUTOSCALER.to_string(),
                minor: minor.to_string(),
            })?;
    let image = pinned
        .pinned_reference()
        .ok_or_else(|| AddonError::ImageUnpinned {
            addon: CLUSTER_AUTOSCALER.to_string(),
            image: CLUSTER_AUTOSCALER.to_string(),
            reference: pinned.reference.clone(),
        })?;
    let c = cluster_autoscaler::cluster_autoscaler(spec, settings, &image);
    let mut out = Vec::new();
    push(&mut out, CLUSTER_AUTOSCALER, &c.service_account)?;
    push(&mut out, CLUSTER_AUTOSCALER, &c.cluster_role)?;
    push(&mut out, CLUSTER_AUTOSCALER, &c.role)?;
    push(&mut out, CLUSTER_AUTOSCALER, &c.cluster_role_binding)?;
    push(&mut out, CLUSTER_AUTOSCALER, &c.role_binding)?;
    if let Some(config) = &c.priority_config {
        push(&mut out, CLUSTER_AUTOSCALER, config)?;
    }
    push(&mut out, CLUSTER_AUTOSCALER, &c.deployment)?;
    out.sort_by_key(|o| apply_rank(o.kind()));
    Ok(AddonSet {
        versions: BTreeMap::from([(CLUSTER_AUTOSCALER.to_string(), addon.version.clone())]),
        objects: out,
        refused: BTreeMap::new(),
    })
}

/// `set` with the cluster autoscaler added when the node spec turns it on (`controlPlane.clusterAutoscaler`,
/// written by `update cluster` from `spec.clusterAutoscaler.enabled`); `set` as it is otherwise.
pub fn with_cluster_autoscaler(
    mut set: AddonSet,
    spec: &NodeSpec,
    release: &Release,
    minor: &str,
) -> Result<AddonSet, AddonError> {
    let Some(settings) = spec
        .control_plane
        .as_ref()
        .and_then(|c| c.cluster_autoscaler.as_ref())
    else {
        return Ok(set);
    };
    let autoscaler = cluster_autoscaler_set(spec, settings, release, minor)?;
    set.versions.extend(autoscaler.versions);
    set.objects.extend(autoscaler.objects);
    set.objects.sort_by_key(|o| apply_rank(o.kind()));
    Ok(set)
}

/// What a control-plane node applies: `set` with the Pod Identity Webhook and the cluster autoscaler when the
/// node spec turns them on ([`with_pod_identity_webhook`], [`with_cluster_autoscaler`]). Each is optional to the
/// rest: when one cannot be rendered (its image unpinned, or not pinned for the release) it alone is refused,
/// named in the second value with the error (which names the image and what to do), and the set is applied
/// without it, so the CNI, CoreDNS, the cloud controller manager and the EBS CSI driver still install. Nothing of
/// a refused add-on is applied, the webhook's `MutatingWebhookConfiguration` included, so no pod creation waits
/// on a webhook that is not there.
pub fn applied_set(
    set: AddonSet,
    spec: &NodeSpec,
    release: &Release,
    minor: &str,
    ca_certificate_pem: &str,
) -> (AddonSet, BTreeMap<String, String>) {
    let mut refused = BTreeMap::new();
    let set = match with_pod_identity_webhook(set.clone(), spec, release, minor, ca_certificate_pem)
    {
        Ok(full) => full,
        Err(e) => {
            refused.insert(POD_IDENTITY_WEBHOOK.to_string(), e.to_string());
            set
        }
    };
    let set = match with_cluster_autoscaler(set.clone(), spec, release, minor) {
        Ok(full) => full,
        Err(e) => {
            refused.insert(CLUSTER_AUTOSCALER.to_string(), e.to_string());
            set
        }
    };
    (set, refused)
}

fn push<T: Serialize + k8s_openapi::Resource>(
    out: &mut Vec<AddonObject>,
    addon: &str,
    object: &T,
) -> Result<(), AddonError> {
    let value = serde_json::to_value(object).map_err(|source| AddonError::Serialize {
        addon: addon.to_string(),
        object: T::KIND.to_string(),
        source,
    })?;
    out.push(AddonObject::new(addon, value));
    Ok(())
}

/// What must exist before what: a namespace before what lives in it, a CRD before its objects, an account and
/// its permissions before the pods that use them.
fn apply_rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "PriorityClass" | "StorageClass" | "CSIDriver" => 2,
        "ServiceAccount" => 3,
        "ClusterRole" | "Role" => 4,
        "ClusterRoleBinding" | "RoleBinding" => 5,
        "ConfigMap" | "Secret" => 6,
        "Service" => 7,
        "DaemonSet" | "Deployment" | "StatefulSet" | "Job" => 9,
        // An admission webhook once the workload that serves it is applied.
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => 10,
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_order_puts_definitions_before_their_users() {
        let kinds = [
            "Deployment",
            "ConfigMap",
            "ClusterRoleBinding",
            "Namespace",
            "ServiceAccount",
            "CustomResourceDefinition",
            "ClusterRole",
            "PodDisruptionBudget",
        ];
        let mut sorted = kinds.to_vec();
        sorted.sort_by_key(|k| apply_rank(k));
        assert_eq!(
            sorted,
            [
                "Namespace",
                "CustomResourceDefinition",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "ConfigMap",
                "PodDisruptionBudget",
                "Deployment"
            ]
        );
    }
}
