//! The Amazon EKS Pod Identity Webhook (pure), as kops installs it when IAM roles for service accounts are on
//! (kubernetes/kops `upup/models/cloudup/resources/addons/eks-pod-identity-webhook.addons.k8s.io/
//! k8s-1.16.yaml.template`, which follows upstream's `deploy/`): a mutating admission webhook that gives a pod of a
//! service account with an IAM role a projected service-account token for the STS audience and the
//! `AWS_ROLE_ARN` / `AWS_WEB_IDENTITY_TOKEN_FILE` environment the AWS SDKs read (docs/irsa.md).
//!
//! Typed k8s-openapi objects: the ServiceAccount, a Role to watch its ConfigMap and a ClusterRole to read
//! service accounts (with their bindings), the ConfigMap mapping each `namespace/name` of
//! `spec.iam.serviceAccountExternalPermissions` to its role (kops's `PodIdentityWebhookConfigMapData`, so no
//! service account needs an annotation), the Deployment on control-plane nodes (one replica per node, at most
//! two), its Service and PodDisruptionBudget, and the MutatingWebhookConfiguration.
//!
//! Where kops differs, and why:
//! - kops has cert-manager issue the serving certificate into a Secret. Here nodeup issues it on every
//!   control-plane node with the Kubernetes CA, like the node's other leaf certificates
//!   ([`crate::cert_plan::pod_identity_webhook`]), into a directory of its own that the pods mount read-only from
//!   the host; the private key never leaves the node and is in no API object. The webhook's `caBundle` is the
//!   Kubernetes CA certificate.
//! - The webhook leaves `kube-system` alone (a namespace selector). With `failurePolicy: Fail` (kops's: a pod that
//!   needs its role must not start without it), a webhook that mutated `kube-system` would block the CNI's and
//!   its own pods while it is not up yet; Ballast's own add-ons get their credentials without it.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, HTTPGetAction, PodSpec, PodTemplateSpec, Probe,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use serde::Serialize;

use crate::model::pki::POD_IDENTITY_WEBHOOK_DIR;

use super::objects::{
    cluster_role_ref, host_path, meta, mount, one_per_control_plane_node, requests, rule,
    service_account_subject, tolerate, CONTROL_PLANE_LABEL, KUBE_SYSTEM, RBAC_GROUP,
};

/// The name of every object of the add-on, and its pods' `app` label (kops's and upstream's).
pub const NAME: &str = crate::model::pki::POD_IDENTITY_WEBHOOK_NAME;
/// Where the pods see it: the webhook's default `--tls-cert` / `--tls-key` directory.
const POD_CERT_DIR: &str = "/etc/webhook/certs";
/// The annotations a pod or service account may carry (`eks.amazonaws.com/role-arn`, ...), as on EKS and kops.
const ANNOTATION_PREFIX: &str = "eks.amazonaws.com";
const WEBHOOK_PORT: i32 = 443;
const METRICS_PORT: i32 = 9999;
/// kops's default replica count; never more than one per control-plane node.
const MAX_REPLICAS: i32 = 2;

/// What the webhook is configured with (from the node spec and the cluster's CA; the image from the pins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentityWebhookConfig {
    /// `--aws-default-region`: the region the injected environment names (and its regional STS endpoint).
    pub region: String,
    /// `--token-audience`: the audience of the injected tokens, a client id of the cluster's IAM OIDC provider.
    pub token_audience: String,
    /// The Kubernetes CA certificate (PEM): the `caBundle` the API server verifies the webhook with.
    pub ca_certificate_pem: String,
    /// Control-plane nodes of the cluster: the replicas (at most [`MAX_REPLICAS`]).
    pub control_plane_nodes: usize,
    /// Each service account with an IAM role, and the role's ARN.
    pub service_accounts: Vec<ServiceAccountRole>,
}

/// One entry of the webhook's ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServiceAccountRole {
    pub namespace: String,
    pub name: String,
    pub role_arn: String,
}

/// The add-on's objects.
pub struct PodIdentityWebhook {
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub cluster_role: ClusterRole,
    pub cluster_role_binding: ClusterRoleBinding,
    pub config: ConfigMap,
    pub service: Service,
    pub disruption_budget: PodDisruptionBudget,
    pub deployment: Deployment,
    pub webhook: MutatingWebhookConfiguration,
}

/// One mapping as the webhook reads it from `config` (upstream's `pkg/containercredentials`-era
/// `ServiceAccountConfig` JSON; field names and order as kops writes them).
#[derive(Serialize)]
struct Mapping<'a> {
    #[serde(rename = "RoleARN")]
    role_arn: &'a str,
    #[serde(rename = "Audience")]
    audience: &'a str,
    #[serde(rename = "UseRegionalSTS")]
    use_regional_sts: bool,
    #[serde(rename = "TokenExpiration")]
    token_expiration: i64,
}

fn named(name: &str, namespace: Option<&str>) -> ObjectMeta {
    meta(name, namespace, NAME)
}

fn app_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), NAME.to_string())])
}

fn selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(app_labels()),
        ..Default::default()
    }
}

/// The ConfigMap's `config`: `namespace/name` -> role, sorted by key (serde_json's map is a BTreeMap), 0 = the
/// webhook's default token lifetime.
fn mappings_json(config: &PodIdentityWebhookConfig) -> String {
    let mappings: BTreeMap<String, Mapping> = config
        .service_accounts
        .iter()
        .map(|sa| {
            (
                format!("{}/{}", sa.namespace, sa.name),
                Mapping {
                    role_arn: &sa.role_arn,
                    audience: &config.token_audience,
                    use_regional_sts: true,
                    token_expiration: 0,
                },
            )
        })
        .collect();
    // A map of strings, bools and integers always serializes.
    serde_json::to_string(&mappings).unwrap_or_default()
}

fn replicas(config: &PodIdentityWebhookConfig) -> i32 {
    i32::try_from(config.control_plane_nodes.max(1))
        .unwrap_or(MAX_REPLICAS)
        .min(MAX_REPLICAS)
}

fn deployment(config: &PodIdentityWebhookConfig, image: &str) -> Deployment {
    let container = Container {
        name: NAME.into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            "/webhook".into(),
            // Serve the certificate from files (nodeup's), not a self-signed one approved through the API.
            "--in-cluster=false".into(),
            format!("--namespace={KUBE_SYSTEM}"),
            format!("--service-name={NAME}"),
            format!("--annotation-prefix={ANNOTATION_PREFIX}"),
            format!("--token-audience={}", config.token_audience),
            "--logtostderr".into(),
            "--watch-config-map".into(),
            "--sts-regional-endpoint".into(),
            format!("--aws-default-region={}", config.region),
            format!("--tls-cert={POD_CERT_DIR}/tls.crt"),
            format!("--tls-key={POD_CERT_DIR}/tls.key"),
            format!("--metrics-port={METRICS_PORT}"),
            "--v=2".into(),
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some("webhook".into()),
                container_port: WEBHOOK_PORT,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
            ContainerPort {
                name: Some("metrics".into()),
                container_port: METRICS_PORT,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        ]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::Int(WEBHOOK_PORT),
                scheme: Some("HTTPS".into()),
                ..Default::default()
            }),
            initial_delay_seconds: Some(5),
            period_seconds: Some(5),
            timeout_seconds: Some(1),
            success_threshold: Some(1),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        resources: Some(requests("10m", "32Mi")),
        // The image runs as root (upstream's, FROM scratch): it reads the 0600 key nodeup wrote.
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        }),
        volume_mounts: Some(vec![mount("cert", POD_CERT_DIR, true)]),
        ..Default::default()
    };
    Deployment {
        metadata: named(NAME, Some(KUBE_SYSTEM)),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas(config)),
            selector: selector(),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app_labels()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(NAME.into()),
                    containers: vec![container],
                    // Only control-plane nodes hold the serving certificate.
                    affinity: Some(one_per_control_plane_node(selector())),
                    tolerations: Some(vec![tolerate(CONTROL_PLANE_LABEL)]),
                    priority_class_name: Some("system-cluster-critical".into()),
                    volumes: Some(vec![host_path(
                        "cert",
                        POD_IDENTITY_WEBHOOK_DIR,
                        "Directory",
                    )]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn webhook(config: &PodIdentityWebhookConfig) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: named(NAME, None),
        webhooks: Some(vec![MutatingWebhook {
            name: format!("{NAME}.amazonaws.com"),
            failure_policy: Some("Fail".into()),
            client_config: WebhookClientConfig {
                service: Some(ServiceReference {
                    name: NAME.into(),
                    namespace: KUBE_SYSTEM.into(),
                    path: Some("/mutate".into()),
                    port: Some(WEBHOOK_PORT),
                }),
                ca_bundle: Some(ByteString(config.ca_certificate_pem.as_bytes().to_vec())),
                ..Default::default()
            },
            namespace_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".into(),
                    operator: "NotIn".into(),
                    values: Some(vec![KUBE_SYSTEM.into()]),
                }]),
                ..Default::default()
            }),
            rules: Some(vec![RuleWithOperations {
                operations: Some(vec!["CREATE".into()]),
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                resources: Some(vec!["pods".into()]),
                ..Default::default()
            }]),
            side_effects: "None".into(),
            // The webhook answers v1beta1 AdmissionReviews (kops and upstream's deploy/ declare only this).
            admission_review_versions: vec!["v1beta1".into()],
            ..Default::default()
        }]),
    }
}

/// The webhook's objects for `config`, running the pinned `image` (`tag@sha256:...`).
pub fn pod_identity_webhook(config: &PodIdentityWebhookConfig, image: &str) -> PodIdentityWebhook {
    let subjects = Some(vec![service_account_subject(NAME)]);
    PodIdentityWebhook {
        service_account: ServiceAccount {
            metadata: named(NAME, Some(KUBE_SYSTEM)),
            ..Default::default()
        },
        role: Role {
            metadata: named(NAME, Some(KUBE_SYSTEM)),
            rules: Some(vec![rule(
                &[""],
                &["configmaps"],
                &["get", "list", "watch"],
            )]),
        },
        role_binding: RoleBinding {
            metadata: named(NAME, Some(KUBE_SYSTEM)),
            role_ref: RoleRef {
                api_group: RBAC_GROUP.into(),
                kind: "Role".into(),
                name: NAME.into(),
            },
            subjects: subjects.clone(),
        },
        cluster_role: ClusterRole {
            metadata: named(NAME, None),
            rules: Some(vec![rule(
                &[""],
                &["serviceaccounts"],
                &["get", "list", "watch"],
            )]),
            ..Default::default()
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: named(NAME, None),
            role_ref: cluster_role_ref(NAME),
            subjects,
        },
        config: ConfigMap {
            metadata: named(NAME, Some(KUBE_SYSTEM)),
            data: Some(BTreeMap::from([(
                "config".to_string(),
                mappings_json(config),
            )])),
            ..Default::default()
        },
        service: Service {
            metadata: named(NAME, Some(KUBE_SYSTEM)),
            spec: Some(ServiceSpec {
                selector: Some(app_labels()),
                ports: Some(vec![
                    ServicePort {
                        name: Some("webhook".into()),
                        port: WEBHOOK_PORT,
                        target_port: Some(IntOrString::Int(WEBHOOK_PORT)),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    },
                    ServicePort {
                        name: Some("metrics".into()),
                        port: METRICS_PORT,
                        target_port: Some(IntOrString::Int(METRICS_PORT)),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        },
        disruption_budget: PodDisruptionBudget {
            metadata: named(NAME, Some(KUBE_SYSTEM)),
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(selector()),
                max_unavailable: Some(IntOrString::String("50%".into())),
                ..Default::default()
            }),
            ..Default::default()
        },
        deployment: deployment(config, image),
        webhook: webhook(config),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "example.test/webhook:v1@sha256:00";

    fn config(control_plane_nodes: usize) -> PodIdentityWebhookConfig {
        PodIdentityWebhookConfig {
            region: "us-west-2".into(),
            token_audience: "amazonaws.com".into(),
            ca_certificate_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
                .into(),
            control_plane_nodes,
            service_accounts: vec![
                ServiceAccountRole {
                    namespace: "team-b".into(),
                    name: "writer".into(),
                    role_arn: "arn:aws:iam::111122223333:role/writer.team-b.sa.c".into(),
                },
                ServiceAccountRole {
                    namespace: "team-a".into(),
                    name: "reader".into(),
                    role_arn: "arn:aws:iam::111122223333:role/reader.team-a.sa.c".into(),
                },
            ],
        }
    }

    #[test]
    fn the_config_map_maps_each_service_account_to_its_role_as_kops_writes_it() {
        let objects = pod_identity_webhook(&config(1), IMAGE);
        let data = objects.config.data.expect("data");
        assert_eq!(
            data["config"],
            r#"{"team-a/reader":{"RoleARN":"arn:aws:iam::111122223333:role/reader.team-a.sa.c","Audience":"amazonaws.com","UseRegionalSTS":true,"TokenExpiration":0},"team-b/writer":{"RoleARN":"arn:aws:iam::111122223333:role/writer.team-b.sa.c","Audience":"amazonaws.com","UseRegionalSTS":true,"TokenExpiration":0}}"#
        );
    }

    #[test]
    fn replicas_are_one_per_control_plane_node_up_to_two() {
        for (nodes, expected) in [(0, 1), (1, 1), (2, 2), (3, 2), (5, 2)] {
            let d = deployment(&config(nodes), IMAGE);
            assert_eq!(d.spec.and_then(|s| s.replicas), Some(expected), "{nodes}");
        }
    }

    #[test]
    fn the_ca_bundle_is_the_kubernetes_ca_and_kube_system_is_left_alone() {
        let objects = pod_identity_webhook(&config(3), IMAGE);
        let hook = &objects.webhook.webhooks.expect("webhooks")[0];
        assert_eq!(
            hook.client_config.ca_bundle.as_ref().map(|b| b.0.clone()),
            Some(config(3).ca_certificate_pem.into_bytes())
        );
        let selector = hook.namespace_selector.as_ref().expect("selector");
        let excluded = &selector.match_expressions.as_ref().expect("expressions")[0];
        assert_eq!(excluded.operator, "NotIn");
        assert_eq!(
            excluded.values.as_deref(),
            Some(&[KUBE_SYSTEM.to_string()][..])
        );
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
    }
}
