//! IAM roles for service accounts (IRSA), the declared part: `spec.serviceAccountIssuerDiscovery` and
//! `spec.iam.serviceAccountExternalPermissions`, shaped as kops shapes them so a kops cluster's spec imports
//! field for field (kops `pkg/apis/kops/cluster.go`: `ServiceAccountIssuerDiscoveryConfig`,
//! `ServiceAccountExternalPermission`, `AWSPermission`), and the pure rules every part of Ballast derives from
//! them: where the discovery documents live and the issuer URL they make ([`store`]), the names of the roles
//! ([`naming`]), their trust policies ([`trust`]) and the published documents ([`discovery`]). Validation is in
//! [`validate`]; `docs/irsa.md` is the reference.

use serde::{Deserialize, Serialize};

pub mod discovery;
pub mod naming;
pub mod node;
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

/// A Kubernetes service account, by namespace and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceAccountRef {
    pub namespace: &'static str,
    pub name: &'static str,
}

/// `spec.serviceAccountIssuerDiscovery`: publish the service-account issuer's OIDC discovery documents, and
/// make the API server's issuer their public location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountIssuerDiscovery {
    /// `s3://bucket[/prefix]`: where `/.well-known/openid-configuration` and `/openid/v1/jwks` are published
    /// (public-read, those two objects only).
    pub discovery_store: String,
    /// Create the IAM OIDC provider trusting the issuer (default false, as in kops). Needed for
    /// `spec.iam.serviceAccountExternalPermissions`.
    #[serde(
        default,
        rename = "enableAWSOIDCProvider",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_aws_oidc_provider: Option<bool>,
    /// Client ids the OIDC provider lists besides [`AWS_AUDIENCE`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_audiences: Vec<String>,
}

/// One entry of `spec.iam.serviceAccountExternalPermissions`: the AWS permissions of one service account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountExternalPermission {
    /// The service account's name.
    pub name: String,
    /// The service account's namespace.
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsPermission>,
}

/// What a service account may do in AWS: managed policies attached to its role, and/or an inline policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsPermission {
    /// Managed policies attached to the role, by ARN.
    #[serde(default, rename = "policyARNs", skip_serializing_if = "Vec::is_empty")]
    pub policy_arns: Vec<String>,
    /// IAM policy statements as JSON: an array of statements (kops's shape) or one statement object. Put on
    /// the role as its inline policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_policy: Option<String>,
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
