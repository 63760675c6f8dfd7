//! A kops Cluster document to Ballast's `Cluster`.

use std::collections::BTreeMap;

use ballast_state::components::ComponentManifest;
use ballast_state::node::{POD_CIDR, SERVICE_CIDR};
use ballast_state::spec::{
    ApiSpec, AutoscalerExpander, Cluster, ClusterAutoscalerSpec, ClusterConfig, ClusterIamSpec,
    ClusterSpec, ClusterSubnet, EncryptionConfigSpec, EtcdMember, EtcdSpec, InstanceGroup,
    KubeletSpec, LoadBalancerSpec, LoadBalancerType, Networking, SubnetType, Topology,
};
use yaml_serde::Value;

use super::walk::{describe, is_ipv6_cidr, Fields, Recorder};
use super::{Choices, KopsDocument, KOPS_API_VERSION};

/// kops's `nonMasqueradeCIDR` that holds exactly Ballast's fixed service and pod ranges.
pub const BALLAST_NON_MASQUERADE_CIDR: &str = "100.64.0.0/10";

/// Why a field with no Ballast equivalent is refused, when nothing more particular applies.
pub const NO_EQUIVALENT: &str = "Ballast has no equivalent of this kops field, so the cluster it describes cannot be \
     built as kops would: remove the field from the input if the cluster can do without it, or keep this cluster \
     on kops";

/// Add-ons kops installs when `enabled: true` and Ballast does not install at all.
const ADDONS_BALLAST_LACKS: [(&str, &str); 5] = [
    (
        "awsLoadBalancerController",
        "the AWS Load Balancer Controller",
    ),
    ("metricsServer", "metrics-server"),
    ("nodeProblemDetector", "the node problem detector"),
    ("snapshotController", "the CSI snapshot controller"),
    ("karpenter", "Karpenter"),
];

/// A mapped cluster, waiting for its groups.
pub struct MappedCluster {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub spec: ClusterSpec,
    /// Each subnet's name and whether it is public in Ballast (kops Public and Utility).
    pub subnet_public: BTreeMap<String, bool>,
    /// The etcd members' instance groups (`main`'s), for the groups' check.
    pub etcd_groups: Vec<String>,
    /// kops's Cluster-level `spec.rollingUpdate`: each group's default, field by field (Ballast has no
    /// Cluster-level field).
    pub rolling_update: super::rolling_update::ClusterDefault,
}

impl MappedCluster {
    pub fn finish(self, instance_groups: Vec<InstanceGroup>) -> ClusterConfig {
        let mut cluster = Cluster::new(&self.name, self.spec);
        cluster.metadata.labels = self.labels;
        ClusterConfig {
            cluster,
            instance_groups,
        }
    }
}

pub fn map(
    document: &KopsDocument,
    choices: Choices,
    fates: &mut Vec<super::FieldFate>,
) -> Option<MappedCluster> {
    let name = document
        .value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let object = if name.is_empty() {
        format!("Cluster ({})", document.source)
    } else {
        format!("Cluster/{name}")
    };
    let mut r = Recorder { object, fates };
    let mut top = r.fields("", document.value.clone())?;
    header(&mut r, &mut top, "Cluster");
    let mut mapped = MappedCluster {
        name: name.clone(),
        labels: BTreeMap::new(),
        spec: ClusterSpec::default(),
        subnet_public: BTreeMap::new(),
        etcd_groups: Vec::new(),
        rolling_update: Default::default(),
    };
    if let Some(meta) = top.take("metadata") {
        if let Some(mut meta) = r.fields("metadata", meta) {
            if meta.take("name").is_some() {
                r.mapped("metadata.name", "metadata.name");
            } else {
                r.refused("metadata.name", "is missing: a cluster needs its name");
            }
            if meta.take("creationTimestamp").is_some() {
                r.dropped(
                    "metadata.creationTimestamp",
                    "when kops stored the object; Ballast's store records its own writes",
                );
            }
            if let Some(labels) = meta.take("labels") {
                if let Some(labels) = r.string_map("metadata.labels", labels) {
                    r.mapped("metadata.labels", "metadata.labels");
                    mapped.labels = labels;
                }
            }
            r.finish(meta, NO_EQUIVALENT);
        }
    } else {
        r.refused("metadata", "is missing: a cluster needs metadata.name");
    }
    match top.take("spec") {
        Some(spec) => {
            if let Some(fields) = r.fields("spec", spec) {
                spec_fields(&mut r, fields, &name, choices, &mut mapped);
            }
        }
        None => r.refused("spec", "is missing"),
    }
    r.finish(top, NO_EQUIVALENT);
    Some(mapped)
}

/// `apiVersion` and `kind` of a kops object.
pub fn header(r: &mut Recorder<'_>, top: &mut Fields, kind: &str) {
    match top.take("apiVersion") {
        Some(Value::String(v)) if v == KOPS_API_VERSION => {
            r.mapped("apiVersion", ballast_state::spec::API_VERSION)
        }
        Some(other) => r.refused(
            "apiVersion",
            format!(
                "is {}: Ballast reads kops's {KOPS_API_VERSION} (what `kops get -o yaml` prints)",
                describe(&other)
            ),
        ),
        None => r.refused(
            "apiVersion",
            format!("is missing: expected {KOPS_API_VERSION}"),
        ),
    }
    if top.take("kind").is_some() {
        r.mapped("kind", kind);
    }
}

fn spec_fields(
    r: &mut Recorder<'_>,
    mut f: Fields,
    name: &str,
    choices: Choices,
    mapped: &mut MappedCluster,
) {
    let spec = &mut mapped.spec;
    if f.take("channel").is_some() {
        r.dropped(
            "spec.channel",
            "kops's channel only chooses defaults (versions, images, add-ons); the import writes the Kubernetes \
             version out and Ballast's pinned manifest (images/manifest.yaml) chooses the rest",
        );
    }
    if let Some(v) = f.take("cloudProvider") {
        match v {
            Value::String(s) if s == "aws" => {
                r.dropped("spec.cloudProvider", "aws: Ballast builds on AWS only")
            }
            Value::Mapping(m) if m.len() == 1 && m.contains_key("aws") => {
                let inner = m.get("aws").cloned().unwrap_or(Value::Null);
                if let Some(inner) = r.fields("spec.cloudProvider.aws", inner) {
                    r.dropped("spec.cloudProvider.aws", "Ballast builds on AWS only");
                    r.finish(inner, NO_EQUIVALENT);
                }
            }
            other => r.refused(
                "spec.cloudProvider",
                format!(
                    "is {}: Ballast builds clusters on AWS only",
                    describe(&other)
                ),
            ),
        }
    }
    if f.take("configBase").is_some() {
        r.dropped(
            "spec.configBase",
            "where kops keeps its state; Ballast's state store is the one named by --state",
        );
    }
    if let Some(v) = f.take("containerRuntime") {
        match r.string("spec.containerRuntime", v).as_deref() {
            Some("containerd") => r.mapped(
                "spec.containerRuntime",
                "(containerd: the only runtime Ballast's images carry)",
            ),
            Some(other) => r.refused(
                "spec.containerRuntime",
                format!("{other:?}: Ballast's nodes run containerd only; remove the field"),
            ),
            None => {}
        }
    }
    if let Some(v) = f.take("kubernetesVersion") {
        if let Some(version) = r.string("spec.kubernetesVersion", v) {
            kubernetes_version(r, &version, spec);
        }
    } else {
        r.refused(
            "spec.kubernetesVersion",
            "is missing: kops fills it from its channel; give the version the cluster runs",
        );
    }
    if let Some(v) = f.take("masterPublicName") {
        if let Some(value) = r.string("spec.masterPublicName", v) {
            if value == format!("api.{name}") {
                r.dropped(
                    "spec.masterPublicName",
                    "kops's default name for the API's DNS record; Ballast makes no DNS record, the API is its \
                     load balancer's DNS name, which `ballast export kubeconfig` writes into your kubeconfig",
                );
            } else {
                r.refused(
                    "spec.masterPublicName",
                    format!(
                        "{value:?}: Ballast cannot serve the API under a name of yours (its certificate names the \
                         load balancer); remove the field, clients then use `ballast export kubeconfig`"
                    ),
                );
            }
        }
    }
    if let Some(v) = f.take("masterInternalName") {
        if let Some(value) = r.string("spec.masterInternalName", v) {
            if value == format!("api.internal.{name}") {
                r.dropped(
                    "spec.masterInternalName",
                    "kops's default internal API name; Ballast's nodes reach the API through its load balancer",
                );
            } else {
                r.refused(
                    "spec.masterInternalName",
                    format!(
                        "{value:?}: Ballast has no internal API name of yours; remove the field"
                    ),
                );
            }
        }
    }
    if let Some(v) = f.take("networkCIDR") {
        if let Some(cidr) = r.string("spec.networkCIDR", v) {
            r.mapped("spec.networkCIDR", "spec.networkCIDR");
            spec.network_cidr = Some(cidr);
        }
    }
    if let Some(v) = f.take("networkID") {
        if let Some(id) = r.string("spec.networkID", v) {
            r.mapped(
                "spec.networkID",
                "spec.networkID (shared: never modified or deleted)",
            );
            spec.network_id = Some(id);
        }
    }
    if let Some(v) = f.take("nonMasqueradeCIDR") {
        match r.string("spec.nonMasqueradeCIDR", v).as_deref() {
            Some(BALLAST_NON_MASQUERADE_CIDR) => r.mapped(
                "spec.nonMasqueradeCIDR",
                format!(
                    "(Ballast's fixed ranges inside it: services {SERVICE_CIDR}, pods {POD_CIDR}, as kops \
                     derives them)"
                ),
            ),
            Some(other) => r.refused(
                "spec.nonMasqueradeCIDR",
                format!(
                    "{other:?}: Ballast's service ({SERVICE_CIDR}) and pod ({POD_CIDR}) ranges are fixed inside \
                     {BALLAST_NON_MASQUERADE_CIDR}; use that or keep this cluster on kops"
                ),
            ),
            None => {}
        }
    }
    for (field, target) in [
        ("sshAccess", "spec.sshAccess"),
        ("kubernetesApiAccess", "spec.kubernetesApiAccess"),
    ] {
        if let Some(v) = f.take(field) {
            let path = format!("spec.{field}");
            if let Some(cidrs) = r.strings(&path, v) {
                let mut kept = Vec::new();
                for (i, cidr) in cidrs.into_iter().enumerate() {
                    if is_ipv6_cidr(&cidr) {
                        r.dropped(
                            &format!("{path}[{i}]"),
                            format!(
                                "{cidr}: an IPv6 source; the cluster's VPC and load balancer are IPv4 only \
                                 (spec.subnets[].ipv6CIDR is refused), so no IPv6 client can reach them"
                            ),
                        );
                    } else {
                        r.mapped(&format!("{path}[{i}]"), format!("{target}: {cidr}"));
                        kept.push(cidr);
                    }
                }
                if field == "sshAccess" {
                    spec.ssh_access = Some(kept);
                } else {
                    spec.kubernetes_api_access = Some(kept);
                }
            }
        }
    }
    if let Some(v) = f.take("cloudLabels") {
        if let Some(labels) = r.string_map("spec.cloudLabels", v) {
            r.mapped("spec.cloudLabels", "spec.cloudLabels");
            spec.cloud_labels = labels;
        }
    }
    if let Some(v) = f.take("encryptionConfig") {
        if let Some(enabled) = r.boolean("spec.encryptionConfig", v) {
            r.mapped("spec.encryptionConfig", "spec.encryptionConfig.enabled");
            spec.encryption_config = Some(EncryptionConfigSpec {
                enabled: Some(enabled),
                provider: None,
            });
        }
    }
    if let Some(v) = f.take("authorization") {
        authorization(r, v);
    }
    if let Some(v) = f.take("kubelet") {
        spec.kubelet = kubelet(r, "spec.kubelet", v, KubeletOf::Cluster);
    }
    if let Some(v) = f.take("iam") {
        let provider_on = f
            .get("serviceAccountIssuerDiscovery")
            .is_some_and(aws_oidc_provider_on);
        iam(r, v, spec, provider_on, name);
    }
    if let Some(v) = f.take("api") {
        api(r, v, spec);
    }
    if let Some(v) = f.take("topology") {
        topology(r, v);
    }
    if let Some(v) = f.take("networking") {
        networking(r, v, choices, spec);
    } else {
        r.refused(
            "spec.networking",
            "is missing: say which network kops's cluster used (amazonvpc, cilium or calico)",
        );
    }
    match f.take("subnets") {
        Some(v) => subnets(r, v, mapped),
        None => r.refused("spec.subnets", "is missing: a cluster needs its subnets"),
    }
    let spec = &mut mapped.spec;
    match f.take("etcdClusters") {
        Some(v) => {
            if let Some(groups) = etcd(r, v, spec) {
                mapped.etcd_groups = groups;
            }
        }
        None => r.refused(
            "spec.etcdClusters",
            "is missing: kops's cluster needs a main etcd cluster",
        ),
    }
    if let Some(v) = f.take("cloudConfig") {
        cloud_config(r, v);
    }
    if let Some(v) = f.take("cloudControllerManager") {
        if let Some(mut ccm) = r.fields("spec.cloudControllerManager", v) {
            r.mapped(
                "spec.cloudControllerManager",
                "(Ballast always runs the AWS cloud controller manager)",
            );
            if let Some(p) = ccm.take("cloudProvider") {
                match r
                    .string("spec.cloudControllerManager.cloudProvider", p)
                    .as_deref()
                {
                    Some("aws") => r.dropped(
                        "spec.cloudControllerManager.cloudProvider",
                        "aws: Ballast's cloud controller manager is AWS's",
                    ),
                    Some(other) => r.refused(
                        "spec.cloudControllerManager.cloudProvider",
                        format!("{other:?}: Ballast runs AWS's cloud controller manager only"),
                    ),
                    None => {}
                }
            }
            r.finish(ccm, NO_EQUIVALENT);
        }
    }
    if let Some(v) = f.take("nodeTerminationHandler") {
        super::termination::node_termination_handler(r, v, spec);
    }
    if let Some(v) = f.take("rollingUpdate") {
        mapped.rolling_update = super::rolling_update::cluster(r, v);
    }
    if let Some(v) = f.take("clusterAutoscaler") {
        cluster_autoscaler(r, v, spec);
    }
    for (field, what) in ADDONS_BALLAST_LACKS {
        if let Some(v) = f.take(field) {
            addon(r, field, what, v);
        }
    }
    if let Some(v) = f.take("serviceAccountIssuerDiscovery") {
        let path = "spec.serviceAccountIssuerDiscovery";
        match yaml_serde::from_value(v) {
            Ok(discovery) => {
                r.mapped(path, path);
                mapped.spec.service_account_issuer_discovery = Some(Box::new(discovery));
            }
            Err(e) => r.refused(
                path,
                format!("not in the shape Ballast reads (kops's): {e}"),
            ),
        }
    }
    let provider_on = mapped
        .spec
        .service_account_issuer_discovery
        .as_ref()
        .is_some_and(|d| d.enable_aws_oidc_provider == Some(true));
    if let Some(v) = f.take("podIdentityWebhook") {
        pod_identity_webhook(r, v, provider_on);
    }
    if let Some(v) = f.take("certManager") {
        cert_manager(r, v);
    }
    r.finish(f, NO_EQUIVALENT);
}

/// Whether a kops `serviceAccountIssuerDiscovery` turns the IAM OIDC provider on.
fn aws_oidc_provider_on(discovery: &Value) -> bool {
    discovery
        .get("enableAWSOIDCProvider")
        .and_then(Value::as_bool)
        == Some(true)
}

/// kops's `podIdentityWebhook`: Ballast installs the Pod Identity Webhook exactly when the IAM OIDC provider is
/// on (`docs/irsa.md`), so `enabled` maps when it agrees with the provider and is refused when it does not.
fn pod_identity_webhook(r: &mut Recorder<'_>, v: Value, provider_on: bool) {
    let path = "spec.podIdentityWebhook";
    let Some(mut w) = r.fields(path, v) else {
        return;
    };
    if let Some(enabled) = w.take("enabled") {
        let enabled_path = "spec.podIdentityWebhook.enabled";
        match (r.boolean(enabled_path, enabled), provider_on) {
            (Some(true), true) => r.mapped(
                enabled_path,
                "(Ballast installs the Pod Identity Webhook with serviceAccountIssuerDiscovery.enableAWSOIDCProvider, \
                 its certificate issued by Ballast: docs/addons.md)",
            ),
            (Some(true), false) => r.refused(
                enabled_path,
                "Ballast installs the Pod Identity Webhook only with the IAM OIDC provider, which its tokens need: \
                 set serviceAccountIssuerDiscovery (discoveryStore, enableAWSOIDCProvider: true), or remove the field",
            ),
            (Some(false), true) => r.refused(
                enabled_path,
                "with the IAM OIDC provider on, Ballast always installs the Pod Identity Webhook (pods of the \
                 service accounts in iam.serviceAccountExternalPermissions get their role's credentials injected): \
                 remove the field",
            ),
            (Some(false), false) => r.dropped(
                enabled_path,
                "enabled: false without the IAM OIDC provider; Ballast installs no webhook either",
            ),
            (None, _) => {}
        }
    }
    r.finish(
        w,
        "Ballast runs the Pod Identity Webhook with kops's settings and one replica per control-plane node (at most \
         two): remove the field",
    );
}

/// kops's `certManager`. kops installs cert-manager (its `enabled`, `managed` by default), among other things for
/// the Pod Identity Webhook's certificate; Ballast issues that certificate itself and does not install
/// cert-manager. A user's own Certificates need cert-manager, so an installed one is refused rather than
/// dropped; `managed: false` (kops's "installed by you") maps, as Ballast also leaves it to the user.
fn cert_manager(r: &mut Recorder<'_>, v: Value) {
    let path = "spec.certManager";
    let Some(mut c) = r.fields(path, v) else {
        return;
    };
    let enabled = c
        .take("enabled")
        .and_then(|v| r.boolean("spec.certManager.enabled", v));
    let managed = c
        .take("managed")
        .and_then(|v| r.boolean("spec.certManager.managed", v));
    match (enabled, managed) {
        (Some(false) | None, _) if c.is_empty() => r.dropped(
            path,
            "not enabled: kops installs no cert-manager, and Ballast installs none",
        ),
        (Some(true), Some(false)) => r.mapped(
            path,
            "(managed: false: cert-manager is yours to install and keep, as on kops; Ballast installs none and \
             issues the Pod Identity Webhook's certificate itself)",
        ),
        _ => r.refused(
            path,
            "kops installs cert-manager here and Ballast does not (it issues the Pod Identity Webhook's \
             certificate itself); your own Certificates and Issuers would stop being served: install cert-manager \
             yourself and set certManager.managed: false, or remove certManager if nothing of yours uses it",
        ),
    }
    r.finish(
        c,
        "this configures the cert-manager kops installs and Ballast does not: remove it, and configure your own \
         cert-manager directly",
    );
}

fn kubernetes_version(r: &mut Recorder<'_>, version: &str, spec: &mut ClusterSpec) {
    let path = "spec.kubernetesVersion";
    let manifest = match ComponentManifest::embedded() {
        Ok(m) => m,
        Err(e) => {
            r.refused(
                path,
                format!("Ballast's pinned manifest cannot be read: {e}"),
            );
            return;
        }
    };
    match manifest.release_for_minor(version) {
        Ok((minor, release)) => {
            let written = version.trim_start_matches('v');
            let mut detail = if written == release.kubernetes {
                format!("spec.kubernetesVersion: {}", release.kubernetes)
            } else {
                format!(
                    "spec.kubernetesVersion: {} (the release Ballast's images pin for {minor}; kops asked for \
                     {version}, a patch release of the same minor)",
                    release.kubernetes
                )
            };
            // An existing cluster is imported at its release even past its end of life; it is told to move on.
            if let Some(date) = &release.end_of_life {
                detail.push_str(&format!(
                    "; Kubernetes {minor} reached its end of life on {date}: upgrade one minor at a time to {} \
                     (docs/upgrade.md)",
                    manifest.supported_minors().join(", ")
                ));
            }
            r.mapped(path, detail);
            spec.kubernetes_version = Some(release.kubernetes.clone());
        }
        Err(e) => r.refused(
            path,
            format!(
                "{e}: Ballast's images carry only those releases; import with a pinned minor, or keep this cluster \
                 on kops until Ballast pins this one"
            ),
        ),
    }
}

fn authorization(r: &mut Recorder<'_>, v: Value) {
    let Some(mut a) = r.fields("spec.authorization", v) else {
        return;
    };
    if let Some(rbac) = a.take("rbac") {
        if let Some(inner) = r.fields("spec.authorization.rbac", rbac) {
            r.mapped(
                "spec.authorization.rbac",
                "(Ballast's API server always authorizes with Node,RBAC)",
            );
            r.finish(inner, NO_EQUIVALENT);
        }
    }
    if a.take("alwaysAllow").is_some() {
        r.refused(
            "spec.authorization.alwaysAllow",
            "Ballast's API server always authorizes with RBAC; remove the field and grant access with RBAC roles",
        );
    }
    r.finish(a, NO_EQUIVALENT);
}

/// The kubelet settings Ballast honors (kops's `spec.kubelet` and an instance group's `spec.kubelet`).
/// Where a kops `kubelet` section is: the cluster's (its settings are kept) or an instance group's (Ballast has
/// no per-group kubelet settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeletOf {
    Cluster,
    Group,
}

/// A kops `kubelet` section: what Ballast keeps of it (the cluster's `failCgroupV1`), the rest mapped or refused.
pub fn kubelet(r: &mut Recorder<'_>, path: &str, v: Value, of: KubeletOf) -> Option<KubeletSpec> {
    let mut out = KubeletSpec::default();
    let mut k = r.fields(path, v)?;
    if let Some(fail) = k.take("failCgroupV1") {
        let field = k.path_of("failCgroupV1");
        if let Some(fail) = r.boolean(&field, fail) {
            match of {
                KubeletOf::Cluster => {
                    r.mapped(&field, "spec.kubelet.failCgroupV1");
                    out.fail_cgroup_v1 = Some(fail);
                }
                KubeletOf::Group => r.refused(
                    &field,
                    "Ballast has no per-group kubelet settings: set spec.kubelet.failCgroupV1 on the cluster",
                ),
            }
        }
    }
    if let Some(eviction) = k.take("evictionHard") {
        let field = k.path_of("evictionHard");
        match (of, eviction.as_str()) {
            (KubeletOf::Group, _) => r.refused(
                &field,
                "Ballast has no per-group kubelet settings: set spec.kubelet.evictionHard on the cluster",
            ),
            (KubeletOf::Cluster, Some(text)) => match ballast_state::spec::parse_eviction_hard(text) {
                Ok(_) => {
                    r.mapped(&field, "spec.kubelet.evictionHard");
                    out.eviction_hard = Some(text.to_string());
                }
                Err(problem) => r.refused(&field, &problem),
            },
            (KubeletOf::Cluster, None) => r.refused(&field, "must be a string: SIGNAL<VALUE,..."),
        }
    }
    if let Some(anonymous) = k.take("anonymousAuth") {
        let field = k.path_of("anonymousAuth");
        match r.boolean(&field, anonymous) {
            Some(false) => r.mapped(
                &field,
                "(Ballast's kubelets refuse anonymous requests: authentication.anonymous.enabled false)",
            ),
            Some(true) => r.refused(
                &field,
                "Ballast's kubelets never accept anonymous requests; remove the field or set it false",
            ),
            None => {}
        }
    }
    r.finish(k, NO_EQUIVALENT);
    (out != KubeletSpec::default()).then_some(out)
}

fn iam(r: &mut Recorder<'_>, v: Value, spec: &mut ClusterSpec, provider_on: bool, cluster: &str) {
    let Some(mut i) = r.fields("spec.iam", v) else {
        return;
    };
    let mut out = ClusterIamSpec::default();
    if let Some(legacy) = i.take("legacy") {
        match r.boolean("spec.iam.legacy", legacy) {
            Some(false) => r.mapped(
                "spec.iam.legacy",
                "(Ballast's roles are least-privilege, held to the cluster's tags; there is no legacy policy)",
            ),
            Some(true) => r.refused(
                "spec.iam.legacy",
                "kops's legacy policies give nodes broad AWS rights; Ballast grants least privilege only: set it \
                 false (and give extra rights to workloads yourself)",
            ),
            None => {}
        }
    }
    if let Some(v) = i.take("allowContainerRegistry") {
        if let Some(b) = r.boolean("spec.iam.allowContainerRegistry", v) {
            r.mapped(
                "spec.iam.allowContainerRegistry",
                "spec.iam.allowContainerRegistry",
            );
            out.allow_container_registry = Some(b);
        }
    }
    if let Some(v) = i.take("permissionsBoundary") {
        if let Some(arn) = r.string("spec.iam.permissionsBoundary", v) {
            r.mapped(
                "spec.iam.permissionsBoundary",
                "spec.iam.permissionsBoundary",
            );
            out.permissions_boundary = Some(arn);
        }
    }
    if let Some(v) = i.take("serviceAccountExternalPermissions") {
        let path = "spec.iam.serviceAccountExternalPermissions";
        match yaml_serde::from_value::<Vec<ballast_state::irsa::ServiceAccountExternalPermission>>(
            v,
        ) {
            Ok(permissions) => {
                r.mapped(path, renamed_roles(path, &permissions, cluster));
                out.service_account_external_permissions = permissions;
            }
            Err(e) => r.refused(
                path,
                format!("not in the shape Ballast reads (kops's): {e}"),
            ),
        }
    }
    if let Some(v) = i.take("useServiceAccountExternalPermissions") {
        let path = "spec.iam.useServiceAccountExternalPermissions";
        match (r.boolean(path, v), provider_on) {
            (Some(true), true) => r.mapped(
                path,
                "(with serviceAccountIssuerDiscovery.enableAWSOIDCProvider on, Ballast's AWS-calling add-ons run on \
                 IAM roles of their own, their statements off the instance roles: docs/irsa.md)",
            ),
            (Some(true), false) => r.refused(
                path,
                "kops's add-ons use IRSA only through the IAM OIDC provider, and so do Ballast's: set \
                 serviceAccountIssuerDiscovery (discoveryStore, enableAWSOIDCProvider: true), or remove the field",
            ),
            (Some(false), true) => r.refused(
                path,
                "false keeps kops's add-ons on the instance roles; with the IAM OIDC provider on, Ballast's add-ons \
                 always run on roles of their own (their permissions leave the instance roles): remove the field \
                 or set it true",
            ),
            (Some(false), false) => r.dropped(
                path,
                "false without the IAM OIDC provider: the add-ons stay on the instance roles, as Ballast's do",
            ),
            (None, _) => {}
        }
    }
    r.finish(i, NO_EQUIVALENT);
    if out != ClusterIamSpec::default() {
        spec.iam = Some(out);
    }
}

/// Where the entries go, and the roles whose names change: kops shortens a name past IAM's 64 characters with a
/// 30-bit FNV-1a hash anyone can collide, Ballast with 130 bits of sha256 (`ballast_state::irsa::naming`), so
/// such a role is made anew under Ballast's name and kops's stays until the operator deletes it (docs/irsa.md,
/// "Role names").
fn renamed_roles(
    path: &str,
    permissions: &[ballast_state::irsa::ServiceAccountExternalPermission],
    cluster: &str,
) -> String {
    use ballast_state::irsa::naming::{kops_role_name, service_account_role_name};
    let renamed: Vec<String> = permissions
        .iter()
        .filter_map(|p| {
            let kops = kops_role_name(&p.name, &p.namespace, cluster);
            let ballast = service_account_role_name(&p.name, &p.namespace, cluster);
            (kops != ballast).then(|| {
                format!(
                    "{}/{}: kops's role {kops} is made anew as {ballast}",
                    p.namespace, p.name
                )
            })
        })
        .collect();
    if renamed.is_empty() {
        return path.to_string();
    }
    format!(
        "{path} (roles whose names kops shortened get a new name, {}; point what names the old role's ARN at the \
         new one, then delete the old role: docs/irsa.md, \"Role names\")",
        renamed.join("; ")
    )
}

fn api(r: &mut Recorder<'_>, v: Value, spec: &mut ClusterSpec) {
    let Some(mut a) = r.fields("spec.api", v) else {
        return;
    };
    let mut lb_type = None;
    let mut security_groups = Vec::new();
    if let Some(dns) = a.take("dns") {
        if let Some(inner) = r.fields("spec.api.dns", dns) {
            let empty = inner.is_empty();
            r.finish(inner, NO_EQUIVALENT);
            if empty {
                r.mapped(
                    "spec.api.dns",
                    "spec.api.loadBalancer.type: Public. Not the same: kops pointed DNS records at the control-plane \
                     instances, with no load balancer; Ballast always fronts the API with a network load balancer",
                );
                lb_type = Some(LoadBalancerType::Public);
            }
        }
    }
    if let Some(lb) = a.take("loadBalancer") {
        if let Some(mut lb) = r.fields("spec.api.loadBalancer", lb) {
            if let Some(t) = lb.take("type") {
                match r.string("spec.api.loadBalancer.type", t).as_deref() {
                    Some("Public") => {
                        r.mapped(
                            "spec.api.loadBalancer.type",
                            "spec.api.loadBalancer.type: Public",
                        );
                        lb_type = Some(LoadBalancerType::Public);
                    }
                    Some("Internal") => {
                        r.mapped(
                            "spec.api.loadBalancer.type",
                            "spec.api.loadBalancer.type: Internal",
                        );
                        lb_type = Some(LoadBalancerType::Internal);
                    }
                    Some(other) => r.refused(
                        "spec.api.loadBalancer.type",
                        format!("{other:?}: use Public or Internal"),
                    ),
                    None => {}
                }
            }
            if let Some(c) = lb.take("class") {
                match r.string("spec.api.loadBalancer.class", c).as_deref() {
                    Some("Network") => r.mapped(
                        "spec.api.loadBalancer.class",
                        "(Ballast's API load balancer is a network load balancer)",
                    ),
                    Some(other) => r.refused(
                        "spec.api.loadBalancer.class",
                        format!(
                            "{other:?}: Ballast fronts the API with a network load balancer only; set class: Network"
                        ),
                    ),
                    None => {}
                }
            }
            if let Some(v) = lb.take("additionalSecurityGroups") {
                if let Some(groups) = r.strings("spec.api.loadBalancer.additionalSecurityGroups", v)
                {
                    r.mapped(
                        "spec.api.loadBalancer.additionalSecurityGroups",
                        "spec.api.loadBalancer.additionalSecurityGroups (given when the load balancer is \
                         created, and never changed after)",
                    );
                    security_groups = groups;
                }
            }
            r.finish(lb, NO_EQUIVALENT);
        }
    }
    r.finish(a, NO_EQUIVALENT);
    if lb_type.is_some() || !security_groups.is_empty() {
        spec.api = Some(ApiSpec {
            load_balancer: Some(LoadBalancerSpec {
                lb_type,
                additional_security_groups: security_groups,
            }),
        });
    }
}

fn topology(r: &mut Recorder<'_>, v: Value) {
    let Some(mut t) = r.fields("spec.topology", v) else {
        return;
    };
    if let Some(dns) = t.take("dns") {
        if let Some(mut dns) = r.fields("spec.topology.dns", dns) {
            if let Some(kind) = dns.take("type") {
                if let Some(kind) = r.string("spec.topology.dns.type", kind) {
                    r.dropped(
                        "spec.topology.dns.type",
                        format!(
                            "{kind}: the kind of DNS zone kops writes the API's name in; Ballast writes no DNS \
                             record (the API is its load balancer's name)"
                        ),
                    );
                }
            }
            r.finish(dns, NO_EQUIVALENT);
        }
    }
    r.finish(t, NO_EQUIVALENT);
}

fn networking(r: &mut Recorder<'_>, v: Value, choices: Choices, spec: &mut ClusterSpec) {
    let Some(mut n) = r.fields("spec.networking", v) else {
        return;
    };
    let mut chosen = None;
    for (key, value) in n.drain() {
        let path = format!("spec.networking.{key}");
        let ballast = match key.as_str() {
            "amazonvpc" => Some(Networking::AmazonVpc),
            "cilium" => Some(Networking::Cilium),
            "calico" => Some(Networking::Calico),
            "kubenet" => Some(Networking::Kubenet),
            "cni" => {
                if let Some(inner) = r.fields(&path, value.clone()) {
                    r.finish(inner, NO_EQUIVALENT);
                }
                match choices.networking {
                    Some(choice) => {
                        r.replaced(
                            &path,
                            format!(
                                "spec.networking: {} (--networking). kops's cni: {{}} installs no network and \
                                 leaves it to you; Ballast installs the one you chose",
                                networking_name(choice)
                            ),
                        );
                        chosen = Some(choice);
                    }
                    None => r.refused(
                        &path,
                        "kops's cni: {} leaves the pod network to you; Ballast installs its own, so choose it with \
                         --networking amazon-vpc|cilium|calico|kubenet (and do not install yours)",
                    ),
                }
                None
            }
            other => {
                r.refused(
                    &path,
                    format!(
                        "{other}: Ballast's pod networks are amazonvpc, cilium, calico and kubenet; import with one of \
                         those (changing the network of a running cluster means new nodes), or keep this cluster on kops"
                    ),
                );
                None
            }
        };
        if let Some(ballast) = ballast {
            if let Some(mut inner) = r.fields(&path, value) {
                r.mapped(
                    &path,
                    format!("spec.networking: {}", networking_name(ballast)),
                );
                if ballast == Networking::Cilium {
                    cilium_options(r, &mut inner, spec);
                }
                r.finish(
                    inner,
                    "Ballast renders this network with its own fixed settings and has no such option: remove it",
                );
                chosen = Some(ballast);
            }
        }
    }
    spec.networking = chosen;
}

/// kops's Cilium options Ballast has: the agent's and the operator's pod annotations (`spec.cilium`).
fn cilium_options(r: &mut Recorder<'_>, inner: &mut Fields, spec: &mut ClusterSpec) {
    for (kops, ballast) in [
        ("agentPodAnnotations", "spec.cilium.agentPodAnnotations"),
        (
            "operatorPodAnnotations",
            "spec.cilium.operatorPodAnnotations",
        ),
    ] {
        let Some(value) = inner.take(kops) else {
            continue;
        };
        let path = inner.path_of(kops);
        let Some(annotations) = r.string_map(&path, value) else {
            continue;
        };
        r.mapped(&path, ballast);
        let cilium = spec.cilium.get_or_insert_with(Default::default);
        if kops == "agentPodAnnotations" {
            cilium.agent_pod_annotations = annotations;
        } else {
            cilium.operator_pod_annotations = annotations;
        }
    }
}

fn networking_name(n: Networking) -> &'static str {
    match n {
        Networking::AmazonVpc => "amazon-vpc",
        Networking::Cilium => "cilium",
        Networking::Calico => "calico",
        Networking::Kubenet => "kubenet",
    }
}

fn subnets(r: &mut Recorder<'_>, v: Value, mapped: &mut MappedCluster) {
    let Value::Sequence(items) = v else {
        r.refused("spec.subnets", format!("is {}, not a list", describe(&v)));
        return;
    };
    let mut any_private = false;
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("spec.subnets[{i}]");
        let Some(mut s) = r.fields(&path, item) else {
            continue;
        };
        let mut subnet = ClusterSubnet::default();
        if let Some(v) = s.take("name") {
            if let Some(name) = r.string(&format!("{path}.name"), v) {
                r.mapped(&format!("{path}.name"), format!("{path}.name"));
                subnet.name = name;
            }
        }
        if let Some(v) = s.take("zone") {
            if let Some(zone) = r.string(&format!("{path}.zone"), v) {
                r.mapped(&format!("{path}.zone"), format!("{path}.zone"));
                subnet.zone = zone;
            }
        }
        if let Some(v) = s.take("cidr") {
            if let Some(cidr) = r.string(&format!("{path}.cidr"), v) {
                r.mapped(&format!("{path}.cidr"), format!("{path}.cidr"));
                subnet.cidr = Some(cidr);
            }
        }
        if let Some(v) = s.take("id") {
            if let Some(id) = r.string(&format!("{path}.id"), v) {
                r.mapped(
                    &format!("{path}.id"),
                    format!("{path}.id (shared: never modified or deleted)"),
                );
                subnet.id = Some(id);
            }
        }
        let field = format!("{path}.type");
        match s.take("type").map(|v| r.string(&field, v)) {
            Some(Some(t)) => match t.as_str() {
                "Public" => {
                    r.mapped(&field, format!("{field}: Public"));
                    subnet.subnet_type = Some(SubnetType::Public);
                }
                "Utility" => {
                    r.mapped(
                        &field,
                        format!(
                            "{field}: Public (Ballast's public subnets hold the load balancer and the NAT gateways, \
                             as kops's utility subnets do; groups name their own subnets)"
                        ),
                    );
                    subnet.subnet_type = Some(SubnetType::Public);
                }
                "Private" => {
                    r.mapped(&field, format!("{field}: Private"));
                    subnet.subnet_type = Some(SubnetType::Private);
                    any_private = true;
                }
                other => r.refused(
                    &field,
                    format!(
                        "{other:?}: Ballast's subnets are Public (kops Public, Utility) or Private"
                    ),
                ),
            },
            Some(None) => {}
            None => r.refused(&field, "is missing: Public, Private or Utility"),
        }
        if s.take("egress").is_some() {
            r.refused(
                &format!("{path}.egress"),
                "Ballast routes a private subnet through a NAT gateway it makes in the zone's public subnet; it \
                 cannot use an existing NAT gateway or instance: remove the field",
            );
        }
        if s.take("ipv6CIDR").is_some() {
            r.refused(
                &format!("{path}.ipv6CIDR"),
                "Ballast's clusters are IPv4 only: remove the field, or keep this cluster on kops",
            );
        }
        r.finish(s, NO_EQUIVALENT);
        let public = subnet.subnet_type == Some(SubnetType::Public);
        mapped.subnet_public.insert(subnet.name.clone(), public);
        mapped.spec.subnets.push(subnet);
    }
    mapped.spec.topology = Some(if any_private {
        Topology::Private
    } else {
        Topology::Public
    });
    r.mapped(
        "spec.subnets",
        format!(
            "spec.topology: {} (from the subnets' types)",
            if any_private { "Private" } else { "Public" }
        ),
    );
}

/// kops's etcd clusters: `main` maps to Ballast's etcd; `events` is kept in it. Returns main's groups.
fn etcd(r: &mut Recorder<'_>, v: Value, spec: &mut ClusterSpec) -> Option<Vec<String>> {
    let Value::Sequence(items) = v else {
        r.refused(
            "spec.etcdClusters",
            format!("is {}, not a list", describe(&v)),
        );
        return None;
    };
    let mut out = EtcdSpec::default();
    let mut main_groups = None;
    let mut events_groups = None;
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("spec.etcdClusters[{i}]");
        let Some(mut c) = r.fields(&path, item) else {
            continue;
        };
        let name = c
            .take("name")
            .and_then(|v| r.string(&format!("{path}.name"), v))
            .unwrap_or_default();
        let main = match name.as_str() {
            "main" => true,
            "events" => false,
            other => {
                r.refused(
                    &format!("{path}.name"),
                    format!("{other:?}: Ballast runs one etcd cluster (kops's main, which also holds events)"),
                );
                r.finish(
                    c,
                    "part of an etcd cluster Ballast does not run (see its name)",
                );
                continue;
            }
        };
        if main {
            r.mapped(&format!("{path}.name"), "spec.etcd");
        } else {
            r.mapped(
                &format!("{path}.name"),
                "(Ballast keeps events in its one etcd cluster, on the same members as kops's main)",
            );
        }
        for field in ["cpuRequest", "memoryRequest"] {
            if c.take(field).is_some() {
                r.dropped(
                    &format!("{path}.{field}"),
                    "a request of kops's etcd pod; Ballast runs etcd as a supervised process on the control-plane \
                     node, no pod, so no scheduler reads it",
                );
            }
        }
        etcd_timing(r, &path, &mut c, main, &mut out);
        let mut groups = Vec::new();
        match c.take("etcdMembers") {
            Some(Value::Sequence(members)) => {
                for (j, member) in members.into_iter().enumerate() {
                    let mpath = format!("{path}.etcdMembers[{j}]");
                    if let Some(m) = r.fields(&mpath, member) {
                        if let Some(group) = etcd_member(r, &mpath, m, main, &mut out) {
                            groups.push(group);
                        }
                    }
                }
            }
            Some(other) => r.refused(
                &format!("{path}.etcdMembers"),
                format!("is {}, not a list", describe(&other)),
            ),
            None => r.refused(&format!("{path}.etcdMembers"), "is missing"),
        }
        r.finish(c, NO_EQUIVALENT);
        if main {
            main_groups = Some(groups);
        } else {
            events_groups = Some((path, groups));
        }
    }
    let Some(main_groups) = main_groups else {
        r.refused("spec.etcdClusters", "has no main cluster");
        return None;
    };
    if let Some((path, events)) = events_groups {
        let mut a = main_groups.clone();
        let mut b = events;
        a.sort();
        b.sort();
        if a != b {
            r.refused(
                &format!("{path}.etcdMembers"),
                "events' members are not on main's instance groups; Ballast keeps events in main's members, so \
                 put events' members on the same groups",
            );
        }
    }
    spec.etcd = Some(out);
    Some(main_groups)
}

/// kops's raft timing, `heartbeatInterval` and `leaderElectionTimeout` (`metav1.Duration`s, e.g. `100ms`):
/// main's become `spec.etcd.heartbeatInterval` and `leaderElectionTimeout`, which the supervisor passes to etcd.
/// (kops declares both but its etcd-manager refuses them at `update cluster`; Ballast applies them.) A value
/// etcd would refuse, alone or as a pair with etcd's default for the other, is refused by its kops path. Events'
/// are dropped: Ballast keeps events in main's etcd, which runs with main's timing.
fn etcd_timing(r: &mut Recorder<'_>, path: &str, c: &mut Fields, main: bool, out: &mut EtcdSpec) {
    use ballast_state::etcd_timing::{format_millis, parse_millis, EtcdTiming, HEARTBEAT_FIELD};
    let fields = [
        ("heartbeatInterval", "spec.etcd.heartbeatInterval"),
        ("leaderElectionTimeout", "spec.etcd.leaderElectionTimeout"),
    ];
    let mut read: [Option<u64>; 2] = [None, None];
    for (i, (field, target)) in fields.iter().enumerate() {
        let Some(v) = c.take(field) else { continue };
        let kops_path = format!("{path}.{field}");
        if !main {
            r.dropped(
                &kops_path,
                "events' etcd timing: Ballast keeps events in main's etcd, which runs with main's                  heartbeatInterval and leaderElectionTimeout",
            );
            continue;
        }
        let Some(text) = r.string(&kops_path, v) else {
            continue;
        };
        match parse_millis(&text) {
            Ok(ms) => read[i] = Some(ms),
            Err(e) => r.refused(&kops_path, format!("{e} (it maps to {target})")),
        }
    }
    if read.iter().all(Option::is_none) {
        return;
    }
    match EtcdTiming::from_millis(read[0], read[1]) {
        Ok(timing) => {
            if read[0].is_some() {
                r.mapped(&format!("{path}.heartbeatInterval"), fields[0].1);
                out.heartbeat_interval = Some(format_millis(timing.heartbeat_interval_ms));
            }
            if read[1].is_some() {
                r.mapped(&format!("{path}.leaderElectionTimeout"), fields[1].1);
                out.leader_election_timeout = Some(format_millis(timing.election_timeout_ms));
            }
        }
        Err((field, e)) => {
            let kops_field = if field == HEARTBEAT_FIELD {
                "heartbeatInterval"
            } else {
                "leaderElectionTimeout"
            };
            r.refused(
                &format!("{path}.{kops_field}"),
                format!("{e}: etcd needs 1..=10000 ms of heartbeat and an election timeout of 5 heartbeats to 50 s"),
            );
            // The other of a refused pair is not mapped either: say so by its path.
            for (i, (other, _)) in fields.iter().enumerate() {
                if *other != kops_field && read[i].is_some() {
                    r.refused(
                        &format!("{path}.{other}"),
                        format!("paired with {kops_field}, which etcd refuses with it"),
                    );
                }
            }
        }
    }
}

/// One member: `name` and `instanceGroup` (main's only; events' members are main's), the volume settings.
fn etcd_member(
    r: &mut Recorder<'_>,
    path: &str,
    mut m: Fields,
    main: bool,
    out: &mut EtcdSpec,
) -> Option<String> {
    let name = m
        .take("name")
        .and_then(|v| r.string(&format!("{path}.name"), v));
    let group = m
        .take("instanceGroup")
        .and_then(|v| r.string(&format!("{path}.instanceGroup"), v));
    if let (Some(name), Some(group)) = (&name, &group) {
        if main {
            r.mapped(
                &format!("{path}.name"),
                format!("spec.etcd.members[].name: {name}"),
            );
            r.mapped(
                &format!("{path}.instanceGroup"),
                format!("spec.etcd.members[].instanceGroup: {group}"),
            );
            out.members.push(EtcdMember {
                name: name.clone(),
                instance_group: group.clone(),
            });
        } else {
            let held = "(events live in main's member on this group)";
            r.mapped(&format!("{path}.name"), held);
            r.mapped(&format!("{path}.instanceGroup"), held);
        }
    } else {
        r.refused(path, "needs name and instanceGroup");
    }
    if let Some(v) = m.take("encryptedVolume") {
        let field = format!("{path}.encryptedVolume");
        if let Some(b) = r.boolean(&field, v) {
            if main {
                same_for_all(
                    r,
                    &field,
                    &mut out.encrypted_volume,
                    b,
                    "spec.etcd.encryptedVolume",
                );
            } else {
                r.dropped(
                    &field,
                    "Ballast makes no volume for events: they live on main's",
                );
            }
        }
    } else if main {
        // kops's default for a member is an unencrypted volume; write it out, so Ballast's default (true)
        // does not silently change what kops made.
        same_for_all(
            r,
            &format!("{path}.encryptedVolume"),
            &mut out.encrypted_volume,
            false,
            "spec.etcd.encryptedVolume (absent: kops's default, false)",
        );
    }
    if let Some(v) = m.take("kmsKeyId") {
        let field = format!("{path}.kmsKeyId");
        if let Some(key) = r.string(&field, v) {
            if main {
                same_for_all(r, &field, &mut out.kms_key_id, key, "spec.etcd.kmsKeyId");
            } else {
                r.dropped(
                    &field,
                    "Ballast makes no volume for events: they live on main's",
                );
            }
        }
    }
    if let Some(v) = m.take("volumeSize") {
        let field = format!("{path}.volumeSize");
        if let Some(size) = r.number(&field, v) {
            if main {
                same_for_all(
                    r,
                    &field,
                    &mut out.volume_size,
                    size,
                    "spec.etcd.volumeSize",
                );
            } else {
                r.dropped(
                    &field,
                    "Ballast makes no volume for events: they live on main's",
                );
            }
        }
    }
    if let Some(v) = m.take("volumeType") {
        let field = format!("{path}.volumeType");
        if let Some(t) = r.string(&field, v) {
            if !main {
                r.dropped(
                    &field,
                    "Ballast makes no volume for events: they live on main's",
                );
            } else if t == "gp3" || t == "gp2" {
                same_for_all(r, &field, &mut out.volume_type, t, "spec.etcd.volumeType");
            } else {
                r.refused(
                    &field,
                    format!("{t:?}: Ballast's etcd volumes are gp3 or gp2"),
                );
            }
        }
    }
    // Ballast's one setting holds for every member: a member without the field (gp3's baseline) beside one with
    // it would silently change, so that is refused too (`members` already holds this member when it is main's).
    let later_member = out.members.len() > 1;
    for field in ["volumeIops", "volumeThroughput"] {
        let field_path = format!("{path}.{field}");
        let target = if field == "volumeIops" {
            "spec.etcd.volumeIops"
        } else {
            "spec.etcd.volumeThroughput"
        };
        let slot = if field == "volumeIops" {
            &mut out.volume_iops
        } else {
            &mut out.volume_throughput
        };
        match m.take(field) {
            Some(_) if !main => r.dropped(
                &field_path,
                "Ballast makes no volume for events: they live on main's",
            ),
            Some(v) => {
                if let Some(n) = r.number(&field_path, v) {
                    if later_member && slot.is_none() {
                        r.refused(
                            &field_path,
                            format!(
                                "{n} while an earlier member has none (the volume type's own): Ballast's etcd \
                                 members share one volume setting; make them equal"
                            ),
                        );
                    } else {
                        same_for_all(r, &field_path, slot, n, target);
                    }
                }
            }
            None if main && slot.is_some() => r.refused(
                &field_path,
                format!(
                    "is absent (the volume type's own) while an earlier member sets {}: Ballast's etcd members \
                     share one volume setting; make them equal",
                    slot.unwrap_or_default()
                ),
            ),
            None => {}
        }
    }
    r.finish(m, NO_EQUIVALENT);
    group
}

/// Ballast's etcd volume settings are one for all members: the first member's value is mapped, a different one
/// on a later member is refused.
fn same_for_all<T: PartialEq + std::fmt::Debug>(
    r: &mut Recorder<'_>,
    path: &str,
    slot: &mut Option<T>,
    value: T,
    target: &str,
) {
    match slot {
        Some(existing) if *existing != value => r.refused(
            path,
            format!(
                "{value:?} differs from another member's {existing:?}: Ballast's etcd members share one volume \
                 setting; make them equal"
            ),
        ),
        Some(_) => r.mapped(path, target),
        None => {
            r.mapped(path, target);
            *slot = Some(value);
        }
    }
}

fn cloud_config(r: &mut Recorder<'_>, v: Value) {
    let Some(mut c) = r.fields("spec.cloudConfig", v) else {
        return;
    };
    if let Some(ebs) = c.take("awsEBSCSIDriver") {
        if let Some(mut ebs) = r.fields("spec.cloudConfig.awsEBSCSIDriver", ebs) {
            if let Some(enabled) = ebs.take("enabled") {
                match r.boolean("spec.cloudConfig.awsEBSCSIDriver.enabled", enabled) {
                    Some(true) => r.mapped(
                        "spec.cloudConfig.awsEBSCSIDriver.enabled",
                        "(Ballast always installs the EBS CSI driver)",
                    ),
                    Some(false) => r.refused(
                        "spec.cloudConfig.awsEBSCSIDriver.enabled",
                        "Ballast always installs the EBS CSI driver (and a default gp3 StorageClass); remove the field",
                    ),
                    None => {}
                }
            }
            r.finish(ebs, NO_EQUIVALENT);
        }
    }
    r.finish(c, NO_EQUIVALENT);
}

/// kops's `spec.clusterAutoscaler`: the options Ballast's add-on takes mapped, the rest refused by path. Off
/// (`enabled` not true), kops installs nothing, and neither does Ballast: dropped.
fn cluster_autoscaler(r: &mut Recorder<'_>, v: Value, spec: &mut ClusterSpec) {
    let path = "spec.clusterAutoscaler";
    let Some(mut f) = r.fields(path, v) else {
        return;
    };
    let enabled = match f.take("enabled") {
        Some(v) => r.boolean(&format!("{path}.enabled"), v),
        None => Some(false),
    };
    if enabled != Some(true) {
        r.dropped(
            path,
            "not enabled: kops installs no cluster autoscaler, and Ballast installs none either",
        );
        f.drain();
        return;
    }
    r.mapped(&format!("{path}.enabled"), "spec.clusterAutoscaler.enabled");
    let mut out = ClusterAutoscalerSpec {
        enabled: Some(true),
        ..Default::default()
    };
    if let Some(v) = f.take("expander") {
        let field = format!("{path}.expander");
        if let Some(name) = r.string(&field, v) {
            let expander = match name.as_str() {
                "random" => Some(AutoscalerExpander::Random),
                "most-pods" => Some(AutoscalerExpander::MostPods),
                "least-waste" => Some(AutoscalerExpander::LeastWaste),
                "priority" => Some(AutoscalerExpander::Priority),
                _ => None,
            };
            match expander {
                Some(e) => {
                    r.mapped(&field, format!("spec.clusterAutoscaler.expander: {name}"));
                    out.expander = Some(e);
                }
                None => r.refused(
                    &field,
                    format!(
                        "{name:?}: Ballast's autoscaler takes one of random, most-pods, least-waste or priority \
                         (price needs GCE's prices, grpc a server of yours, a list chains them): choose one"
                    ),
                ),
            }
        }
    }
    let booleans: [(&str, &mut Option<bool>); 3] = [
        (
            "balanceSimilarNodeGroups",
            &mut out.balance_similar_node_groups,
        ),
        (
            "skipNodesWithLocalStorage",
            &mut out.skip_nodes_with_local_storage,
        ),
        (
            "skipNodesWithSystemPods",
            &mut out.skip_nodes_with_system_pods,
        ),
    ];
    for (name, slot) in booleans {
        if let Some(v) = f.take(name) {
            let field = format!("{path}.{name}");
            if let Some(b) = r.boolean(&field, v) {
                r.mapped(&field, format!("spec.clusterAutoscaler.{name}"));
                *slot = Some(b);
            }
        }
    }
    // kops writes Go durations (`10m0s`); Ballast's grammar reads them as they are (a sum of groups).
    let durations: [(&str, &mut Option<String>); 3] = [
        (
            "scaleDownDelayAfterAdd",
            &mut out.scale_down_delay_after_add,
        ),
        ("scaleDownUnneededTime", &mut out.scale_down_unneeded_time),
        ("maxNodeProvisionTime", &mut out.max_node_provision_time),
    ];
    for (name, slot) in durations {
        if let Some(v) = f.take(name) {
            let field = format!("{path}.{name}");
            if let Some(s) = r.string(&field, v) {
                r.mapped(&field, format!("spec.clusterAutoscaler.{name}"));
                *slot = Some(s);
            }
        }
    }
    if let Some(v) = f.take("createPriorityExpenderConfig") {
        r.only_true(
            &format!("{path}.createPriorityExpenderConfig"),
            v,
            "Ballast writes the priority expander's ConfigMap whenever the expander is priority",
            "false: Ballast always writes the priority expander's ConfigMap from the groups' autoscalePriority; \
             remove the field",
        );
    }
    r.finish(
        f,
        "Ballast's cluster autoscaler does not take this option (docs/addons.md lists those it does): remove it, \
         or keep this cluster on kops",
    );
    spec.cluster_autoscaler = Some(out);
}

/// An add-on Ballast does not install: refused when enabled, dropped when kops's own field says it is off.
fn addon(r: &mut Recorder<'_>, field: &str, what: &str, v: Value) {
    let path = format!("spec.{field}");
    let enabled = v.get("enabled").and_then(Value::as_bool);
    if enabled == Some(false) && v.as_mapping().is_some_and(|m| m.len() == 1) {
        r.dropped(
            &path,
            format!("enabled: false; Ballast does not install {what} either"),
        );
    } else {
        r.refused(
            &path,
            format!(
                "Ballast does not install {what}: remove the field and install it yourself once the cluster is up, \
                 or keep this cluster on kops"
            ),
        );
    }
}
