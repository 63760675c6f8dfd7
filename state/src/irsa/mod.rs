//! IAM roles for service accounts (IRSA), the declared part: `spec.serviceAccountIssuerDiscovery` and
//! `spec.iam.serviceAccountExternalPermissions`, shaped as kops shapes them so a kops cluster's spec imports
//! field for field (kops `pkg/apis/kops/cluster.go`: `ServiceAccountIssuerDiscoveryConfig`,
//! `ServiceAccountExternalPermission`, `AWSPermission`), and the pure rules every part of Ballast derives from
//! them: where the discovery documents live and the issuer URL they make ([`store`]), the names of the roles
//! ([`naming`]), their trust policies ([`trust`]), and what a control-plane node spec carries ([`IssuerSettings`],
//! [`AddonRoles`]). Validation is in [`validate`]; `docs/irsa.md` is the reference. The spec's types are in
//! `spec` (re-exported here); what needs the keysets or the node spec is in `crate::issuer`. This module imports
//! neither, so `validate` may use it without an import circle.

use serde::{Deserialize, Serialize};

pub mod naming;
pub mod store;
pub mod trust;
pub mod validate;

/// The audience (OIDC client id) of the tokens pods present to STS, and the one client id the IAM OIDC provider
/// always lists. kops uses `amazonaws.com` for its OIDC provider, its own add-ons' projected tokens and the pod
/// identity webhook's `--token-audience`; the webhook's own default (and EKS's) is `sts.amazonaws.com`. Ballast
/// takes kops's, so the trust policies of a kops cluster imported into Ballast keep matching the tokens its pods
/// already hold; `additionalAudiences` adds others to the provider.
pub const AWS_AUDIENCE: &str = "amazonaws.com";

/// The service accounts of Ballast's own add-ons that call AWS. With IRSA on, Ballast gives each a role of its
/// own, so an operator's `serviceAccountExternalPermissions` may not name them.
pub const CLOUD_CONTROLLER_MANAGER_ACCOUNT: ServiceAccountRef = ServiceAccountRef {
    namespace: "kube-system",
    name: "cloud-controller-manager",
};
/// The EBS CSI driver's controller (`nodeup/src/addons/ebs_csi.rs`).
pub const EBS_CSI_CONTROLLER_ACCOUNT: ServiceAccountRef = ServiceAccountRef {
    namespace: "kube-system",
    name: "ebs-csi-controller-sa",
};

/// The cluster autoscaler (`nodeup/src/addons/cluster_autoscaler.rs`, `spec.clusterAutoscaler.enabled`): with
/// IRSA on, its Auto Scaling permissions leave the control-plane role for a role of its own.
pub const CLUSTER_AUTOSCALER_ACCOUNT: ServiceAccountRef = ServiceAccountRef {
    namespace: "kube-system",
    name: crate::autoscaler::SERVICE_ACCOUNT,
};

/// The Amazon VPC CNI's `aws-node` DaemonSet (amazon-vpc networking, on every node): with IRSA on, its ENI
/// permissions leave both instance roles for a role of its own.
pub const AMAZON_VPC_CNI_ACCOUNT: ServiceAccountRef = ServiceAccountRef {
    namespace: "kube-system",
    name: "aws-node",
};

/// A Kubernetes service account, by namespace and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceAccountRef {
    pub namespace: &'static str,
    pub name: &'static str,
}

pub use crate::spec::{
    AwsPermission, ServiceAccountExternalPermission, ServiceAccountIssuerDiscovery,
};

/// The API server's issuer settings when discovery is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssuerSettings {
    /// The published issuer: the first `--service-account-issuer`, the one new tokens carry.
    pub issuer: String,
    /// `--service-account-jwks-uri`: where the published JWKS is.
    pub jwks_uri: String,
    /// Issuers still accepted (later `--service-account-issuer` flags): the in-cluster one, so tokens issued
    /// before the switch keep working until they expire, as kops does.
    pub previous_issuers: Vec<String>,
    /// `--api-audiences`: the audiences the API server accepts, and gives tokens that ask for none.
    pub api_audiences: Vec<String>,
}

/// Roles of Ballast's own AWS-calling add-ons, by ARN, when they run on IRSA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonRoles {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_controller_manager: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs_csi_controller: Option<String>,
    /// The Amazon VPC CNI's `aws-node` (amazon-vpc networking only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_node: Option<String>,
    /// The cluster autoscaler (with `spec.clusterAutoscaler.enabled` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_autoscaler: Option<String>,
}

/// What the Pod Identity Webhook (`nodeup/src/addons/pod_identity_webhook.rs`) is configured with on a
/// control-plane node: present exactly when the add-ons run on IRSA (discovery and the IAM OIDC provider on).
/// Ballast writes it because the node knows neither the account id the role ARNs need nor the spec's entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodIdentityWebhookSettings {
    /// `--aws-default-region`: the cluster's region.
    pub region: String,
    /// `--token-audience`: [`AWS_AUDIENCE`], the client id every service-account role trusts.
    pub audience: String,
    /// Each `spec.iam.serviceAccountExternalPermissions` entry and its role, in the spec's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<ServiceAccountRoleArn>,
}

/// One service account and the ARN of the role Ballast made for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountRoleArn {
    pub namespace: String,
    pub name: String,
    pub role_arn: String,
}

impl PodIdentityWebhookSettings {
    /// The settings for `spec` (named `cluster`, in `region`) whose roles live in the account and partition of
    /// `instance_profile_arn` (`arn:PARTITION:iam::ACCOUNT:instance-profile/NAME`, one of the cluster's own, so
    /// the ARNs are known before the roles exist); `None` when the add-ons are not on IRSA or the ARN is not one.
    pub fn of(
        spec: &crate::spec::ClusterSpec,
        cluster: &str,
        region: &str,
        instance_profile_arn: &str,
    ) -> Option<Self> {
        let irsa = IrsaSettings::of(spec).filter(|irsa| irsa.oidc_provider)?;
        let mut parts = instance_profile_arn.split(':');
        if parts.next() != Some("arn") {
            return None;
        }
        let partition = parts.next()?;
        // Past `iam` and the empty region.
        let account = parts.nth(2)?;
        if partition.is_empty() || account.is_empty() {
            return None;
        }
        let service_accounts = irsa
            .permissions
            .iter()
            .map(|p| ServiceAccountRoleArn {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                role_arn: format!(
                    "arn:{partition}:iam::{account}:role/{}",
                    naming::service_account_role_name(&p.name, &p.namespace, cluster)
                ),
            })
            .collect();
        Some(PodIdentityWebhookSettings {
            region: region.to_string(),
            audience: AWS_AUDIENCE.to_string(),
            service_accounts,
        })
    }
}

/// The issuer every cluster's API server had before discovery: kube-apiserver's in-cluster name for the cluster
/// domain (`cluster.local`).
pub fn in_cluster_issuer(cluster_domain: &str) -> String {
    format!("https://kubernetes.default.svc.{cluster_domain}")
}

impl IssuerSettings {
    /// The settings for a published `issuer`. The API audiences are the issuers themselves, new then old, which
    /// is what kube-apiserver takes when `--api-audiences` is unset: tokens made before the switch carry the
    /// old issuer as audience and keep authenticating. `amazonaws.com` is deliberately not an API audience: a
    /// token minted for STS must not be accepted by the Kubernetes API (TokenRequest mints it whatever the API
    /// audiences are, so IRSA needs none of them).
    pub fn published(issuer: &str, cluster_domain: &str) -> Self {
        let old = in_cluster_issuer(cluster_domain);
        IssuerSettings {
            issuer: issuer.to_string(),
            jwks_uri: store::jwks_uri(issuer),
            previous_issuers: vec![old.clone()],
            api_audiences: vec![issuer.to_string(), old],
        }
    }
}

/// What the completed spec says of IRSA, in one place for the planners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrsaSettings<'a> {
    pub discovery: &'a ServiceAccountIssuerDiscovery,
    /// Whether the IAM OIDC provider is made (and with it every service-account role).
    pub oidc_provider: bool,
    pub permissions: &'a [ServiceAccountExternalPermission],
}

impl<'a> IrsaSettings<'a> {
    /// IRSA's settings of a cluster spec, or `None` when discovery is off.
    pub fn of(spec: &'a crate::spec::ClusterSpec) -> Option<Self> {
        let discovery = spec.service_account_issuer_discovery.as_ref()?;
        Some(IrsaSettings {
            discovery,
            oidc_provider: discovery.enable_aws_oidc_provider.unwrap_or(false),
            permissions: spec
                .iam
                .as_ref()
                .map(|iam| iam.service_account_external_permissions.as_slice())
                .unwrap_or(&[]),
        })
    }

    /// Every audience the provider lists: [`AWS_AUDIENCE`] first, then the additional ones.
    pub fn audiences(&self) -> Vec<String> {
        let mut audiences = vec![AWS_AUDIENCE.to_string()];
        for audience in &self.discovery.additional_audiences {
            if !audiences.contains(audience) {
                audiences.push(audience.clone());
            }
        }
        audiences
    }
}

/// Whether Ballast's own AWS-calling add-ons run on roles of their own: discovery and the provider both on.
pub fn addons_on_irsa(spec: &crate::spec::ClusterSpec) -> bool {
    IrsaSettings::of(spec).is_some_and(|irsa| irsa.oidc_provider)
}

/// Whether the Amazon VPC CNI runs on a role of its own: the add-ons are on IRSA and the networking is
/// amazon-vpc. Its ENI statements then leave both instance roles (ctl's `cloud::cni`).
pub fn aws_node_on_irsa(spec: &crate::spec::ClusterSpec) -> bool {
    addons_on_irsa(spec) && spec.networking == Some(crate::spec::Networking::AmazonVpc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(provider: bool) -> crate::spec::ClusterSpec {
        yaml_serde::from_str(&format!(
            "kubernetesVersion: 1.33.4
subnets:
- {{name: us-west-2a, zone: us-west-2a}}
serviceAccountIssuerDiscovery:
  discoveryStore: s3://demo-oidc/demo.example.com
  enableAWSOIDCProvider: {provider}
iam:
  serviceAccountExternalPermissions:
  - {{name: reports, namespace: team-a, aws: {{policyARNs: [arn:aws:iam::aws:policy/ReadOnlyAccess]}}}}
  - {{name: uploader, namespace: team-b, aws: {{policyARNs: [arn:aws:iam::aws:policy/ReadOnlyAccess]}}}}
"
        ))
        .expect("a cluster spec")
    }

    const PROFILE: &str = "arn:aws-cn:iam::210987654321:instance-profile/masters.demo.example.com";

    #[test]
    fn the_webhook_gets_each_service_accounts_role_in_the_profiles_account_and_partition() {
        let settings =
            PodIdentityWebhookSettings::of(&spec(true), "demo.example.com", "cn-north-1", PROFILE)
                .expect("on with the provider");
        assert_eq!(settings.region, "cn-north-1");
        assert_eq!(settings.audience, AWS_AUDIENCE);
        assert_eq!(
            settings.service_accounts,
            [
                ServiceAccountRoleArn {
                    namespace: "team-a".into(),
                    name: "reports".into(),
                    role_arn:
                        "arn:aws-cn:iam::210987654321:role/reports.team-a.sa.demo.example.com"
                            .into(),
                },
                ServiceAccountRoleArn {
                    namespace: "team-b".into(),
                    name: "uploader".into(),
                    role_arn:
                        "arn:aws-cn:iam::210987654321:role/uploader.team-b.sa.demo.example.com"
                            .into(),
                },
            ]
        );
    }

    #[test]
    fn no_webhook_without_the_provider_or_without_a_usable_profile_arn() {
        assert_eq!(
            PodIdentityWebhookSettings::of(&spec(false), "demo.example.com", "us-west-2", PROFILE),
            None
        );
        for profile in ["", "not-an-arn", "arn:aws:iam::"] {
            assert_eq!(
                PodIdentityWebhookSettings::of(
                    &spec(true),
                    "demo.example.com",
                    "us-west-2",
                    profile
                ),
                None,
                "{profile}"
            );
        }
    }
}
