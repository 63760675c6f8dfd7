//! IRSA's rules: `spec.serviceAccountIssuerDiscovery` and `spec.iam.serviceAccountExternalPermissions`, each
//! error naming its path and what to do. Called by [`crate::validate::validate`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;

use super::store::DiscoveryStore;
use super::trust::inline_policy_document;
use super::{
    ServiceAccountExternalPermission, ServiceAccountIssuerDiscovery, ServiceAccountRef,
    AMAZON_VPC_CNI_ACCOUNT, AWS_AUDIENCE, CLOUD_CONTROLLER_MANAGER_ACCOUNT,
    EBS_CSI_CONTROLLER_ACCOUNT,
};
use crate::error::FieldError;
use crate::spec::{ClusterConfig, KIND_CLUSTER};

/// Service accounts given AWS permissions in one cluster: each is an IAM role, and `update cluster` and
/// `delete cluster` make calls per role. IAM's default quota is 1000 roles per account, shared by every
/// cluster in it.
pub const MAX_SERVICE_ACCOUNT_PERMISSIONS: usize = 100;
/// Managed policies one role may have attached: IAM's default quota ("Managed policies attached to an IAM
/// role": 10).
pub const MAX_POLICY_ARNS: usize = 10;
/// Characters of an inline policy: IAM's limit for a role's inline policies together (10,240 characters,
/// whitespace not counted; counted here with it, the stricter reading).
pub const MAX_INLINE_POLICY_CHARS: usize = 10_240;
/// Audiences besides `amazonaws.com`: IAM lets a provider list 100 client ids; a cluster needs a handful.
pub const MAX_ADDITIONAL_AUDIENCES: usize = 10;
/// IAM's limit on one client id's length.
pub const MAX_AUDIENCE_CHARS: usize = 255;

static POLICY_ARN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^arn:aws(-[a-z]+)*:iam::([0-9]{12}|aws):policy/([\w+=,.@-]+/)*[\w+=,.@-]{1,128}$")
        .expect("static regex")
});
/// A namespace is a DNS label (RFC 1123), at most 63 characters.
static DNS_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$").expect("static regex"));
/// A service account's name is a DNS subdomain (RFC 1123), at most 253 characters.
static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
        .expect("static regex")
});

struct Report<'a> {
    object: String,
    errors: &'a mut Vec<FieldError>,
}

impl Report<'_> {
    fn error(&mut self, path: impl AsRef<str>, message: impl Into<String>) {
        self.errors
            .push(FieldError::new(&self.object, path.as_ref(), message));
    }
}

/// Checks IRSA's fields of a completed config.
pub fn check(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    let spec = &config.cluster.spec;
    let mut report = Report {
        object: format!("{KIND_CLUSTER}/{}", config.cluster.metadata.name),
        errors,
    };
    if let Some(discovery) = &spec.service_account_issuer_discovery {
        check_discovery(&mut report, discovery);
    }
    let permissions = spec
        .iam
        .as_ref()
        .map(|iam| iam.service_account_external_permissions.as_slice())
        .unwrap_or(&[]);
    if permissions.is_empty() {
        return;
    }
    const PATH: &str = "spec.iam.serviceAccountExternalPermissions";
    match &spec.service_account_issuer_discovery {
        None => report.error(
            PATH,
            "needs spec.serviceAccountIssuerDiscovery with enableAWSOIDCProvider: true: a role for a service \
             account is assumed with the service account's token, which AWS can verify only through an IAM OIDC \
             provider trusting the cluster's published issuer",
        ),
        Some(discovery) if discovery.enable_aws_oidc_provider != Some(true) => report.error(
            PATH,
            "needs spec.serviceAccountIssuerDiscovery.enableAWSOIDCProvider: true: without the IAM OIDC provider \
             AWS cannot verify the service accounts' tokens, so no role could be assumed",
        ),
        Some(_) => {}
    }
    if permissions.len() > MAX_SERVICE_ACCOUNT_PERMISSIONS {
        report.error(
            PATH,
            format!(
                "lists {} service accounts, more than {MAX_SERVICE_ACCOUNT_PERMISSIONS}: each is an IAM role; \
                 give several workloads one service account, or split the cluster",
                permissions.len()
            ),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, permission) in permissions.iter().enumerate() {
        check_permission(&mut report, &format!("{PATH}[{i}]"), permission, &mut seen);
        // Ballast's autoscaler takes its service account only when it is on: an operator running an autoscaler
        // of their own may give it this account's role otherwise.
        let account = super::CLUSTER_AUTOSCALER_ACCOUNT;
        if crate::autoscaler::enabled(spec)
            && (permission.namespace.as_str(), permission.name.as_str())
                == (account.namespace, account.name)
        {
            report.error(
                format!("{PATH}[{i}]"),
                format!(
                    "{}/{} is the service account of the cluster autoscaler Ballast runs \
                     (spec.clusterAutoscaler.enabled) and gives a role of its own: choose another service account",
                    account.namespace, account.name
                ),
            );
        }
    }
    check_role_names(
        &mut report,
        permissions,
        &addon_accounts(spec),
        &config.cluster.metadata.name,
        super::naming::service_account_role_name,
    );
}

/// The service accounts of Ballast's add-ons that get roles in `spec` (their names must not collide with an
/// entry's either).
fn addon_accounts(spec: &crate::spec::ClusterSpec) -> Vec<ServiceAccountRef> {
    let mut accounts = Vec::new();
    if super::addons_on_irsa(spec) {
        accounts.extend([CLOUD_CONTROLLER_MANAGER_ACCOUNT, EBS_CSI_CONTROLLER_ACCOUNT]);
        if super::aws_node_on_irsa(spec) {
            accounts.push(AMAZON_VPC_CNI_ACCOUNT);
        }
        if crate::autoscaler::enabled(spec) {
            accounts.push(super::CLUSTER_AUTOSCALER_ACCOUNT);
        }
    }
    accounts
}

/// Every role the cluster makes must have a name of its own: two service accounts under one name would share one
/// IAM role (one trust, both policies). Refuses the second entry of each colliding pair, naming the first.
/// `naming` is the role naming (a parameter so the rule is tested with a naming whose collisions are known).
fn check_role_names(
    report: &mut Report<'_>,
    permissions: &[ServiceAccountExternalPermission],
    addons: &[ServiceAccountRef],
    cluster: &str,
    naming: fn(&str, &str, &str) -> String,
) {
    const PATH: &str = "spec.iam.serviceAccountExternalPermissions";
    let accounts: Vec<(&str, &str)> = permissions
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .chain(addons.iter().map(|a| (a.namespace, a.name)))
        .collect();
    let describe = |i: usize| {
        let (namespace, name) = accounts[i];
        if i < permissions.len() {
            format!("{PATH}[{i}] ({namespace}/{name})")
        } else {
            format!("the add-on service account {namespace}/{name}")
        }
    };
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, &(namespace, name)) in accounts.iter().enumerate() {
        let role = naming(name, namespace, cluster);
        let Some(&first) = seen.get(&role) else {
            seen.insert(role, i);
            continue;
        };
        // The same account twice is refused as listed twice; an add-on's account as reserved.
        if accounts[first] == (namespace, name) {
            continue;
        }
        let (entry, other) = if i < permissions.len() {
            (i, first)
        } else {
            (first, i)
        };
        if entry >= permissions.len() {
            continue;
        }
        report.error(
            format!("{PATH}[{entry}]"),
            format!(
                "its IAM role would be named {role:?}, as would that of {}: two service accounts cannot share \
                 a role (names over IAM's 64 characters are shortened, docs/irsa.md); give one of them a \
                 shorter or different name",
                describe(other)
            ),
        );
    }
}

fn check_discovery(report: &mut Report<'_>, discovery: &ServiceAccountIssuerDiscovery) {
    const PATH: &str = "spec.serviceAccountIssuerDiscovery";
    if let Err(error) = DiscoveryStore::parse(&discovery.discovery_store) {
        report.error(format!("{PATH}.discoveryStore"), error.to_string());
    }
    let audiences = &discovery.additional_audiences;
    if audiences.len() > MAX_ADDITIONAL_AUDIENCES {
        report.error(
            format!("{PATH}.additionalAudiences"),
            format!(
                "lists {} audiences, more than {MAX_ADDITIONAL_AUDIENCES}",
                audiences.len()
            ),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, audience) in audiences.iter().enumerate() {
        let path = format!("{PATH}.additionalAudiences[{i}]");
        if audience.is_empty()
            || audience.chars().count() > MAX_AUDIENCE_CHARS
            || audience
                .chars()
                .any(|c| c.is_control() || c.is_whitespace())
        {
            report.error(
                path,
                format!(
                    "{audience:?} is not an audience IAM accepts: 1-{MAX_AUDIENCE_CHARS} characters, no spaces"
                ),
            );
        } else if audience == AWS_AUDIENCE {
            report.error(
                path,
                format!("{AWS_AUDIENCE:?} is always an audience: remove it"),
            );
        } else if !seen.insert(audience.as_str()) {
            report.error(path, format!("{audience:?} is listed twice"));
        }
    }
}

fn check_permission<'p>(
    report: &mut Report<'_>,
    path: &str,
    permission: &'p ServiceAccountExternalPermission,
    seen: &mut BTreeSet<(&'p str, &'p str)>,
) {
    let (namespace, name) = (permission.namespace.as_str(), permission.name.as_str());
    let mut names_valid = true;
    if !DNS_LABEL.is_match(namespace) {
        names_valid = false;
        report.error(
            format!("{path}.namespace"),
            format!(
                "{namespace:?} is not a Kubernetes namespace name: 1-63 lowercase letters, digits or '-', \
                 starting and ending with a letter or digit"
            ),
        );
    }
    if name.len() > 253 || !DNS_SUBDOMAIN.is_match(name) {
        names_valid = false;
        report.error(
            format!("{path}.name"),
            format!(
                "{name:?} is not a Kubernetes service account name: at most 253 lowercase letters, digits, '-' \
                 and '.', each '.'-separated part starting and ending with a letter or digit"
            ),
        );
    }
    if names_valid {
        for reserved in [
            CLOUD_CONTROLLER_MANAGER_ACCOUNT,
            EBS_CSI_CONTROLLER_ACCOUNT,
            AMAZON_VPC_CNI_ACCOUNT,
        ] {
            if (reserved.namespace, reserved.name) == (namespace, name) {
                report.error(
                    path,
                    format!(
                        "{namespace}/{name} is the service account of an add-on Ballast runs and gives a role of \
                         its own: choose another service account"
                    ),
                );
            }
        }
        if !seen.insert((namespace, name)) {
            report.error(
                path,
                format!("{namespace}/{name} is listed twice: give one entry all of its policies"),
            );
        }
    }
    let Some(aws) = &permission.aws else {
        report.error(
            format!("{path}.aws"),
            "is missing: give policyARNs and/or inlinePolicy, or remove the entry",
        );
        return;
    };
    if aws.policy_arns.is_empty() && aws.inline_policy.is_none() {
        report.error(
            format!("{path}.aws"),
            "grants nothing: give policyARNs and/or inlinePolicy, or remove the entry",
        );
    }
    if aws.policy_arns.len() > MAX_POLICY_ARNS {
        report.error(
            format!("{path}.aws.policyARNs"),
            format!(
                "lists {} policies, more than the {MAX_POLICY_ARNS} IAM attaches to one role: merge some into \
                 inlinePolicy or one managed policy",
                aws.policy_arns.len()
            ),
        );
    } else {
        let mut arns = BTreeSet::new();
        for (i, arn) in aws.policy_arns.iter().enumerate() {
            let arn_path = format!("{path}.aws.policyARNs[{i}]");
            if !POLICY_ARN.is_match(arn) {
                report.error(
                    arn_path,
                    format!(
                        "{arn:?} is not an IAM managed policy ARN (arn:aws:iam::ACCOUNT:policy/NAME, or \
                         arn:aws:iam::aws:policy/NAME for an AWS-managed one)"
                    ),
                );
            } else if !arns.insert(arn.as_str()) {
                report.error(arn_path, format!("{arn:?} is listed twice"));
            }
        }
    }
    if let Some(inline) = &aws.inline_policy {
        let inline_path = format!("{path}.aws.inlinePolicy");
        if inline.chars().count() > MAX_INLINE_POLICY_CHARS {
            report.error(
                inline_path,
                format!(
                    "is {} characters, more than the {MAX_INLINE_POLICY_CHARS} IAM allows a role's inline \
                     policy: move statements into a managed policy and list it in policyARNs",
                    inline.chars().count()
                ),
            );
        } else if let Err(error) = inline_policy_document(inline) {
            report.error(inline_path, error.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::irsa::naming::tests::{
        FNV_COLLIDING, FNV_COLLIDING_CLUSTER, FNV_COLLIDING_NAMESPACE,
    };
    use crate::irsa::naming::{kops_role_name, service_account_role_name};

    /// A cluster whose entries are `reports`, then the two service accounts whose kops role names collide.
    fn colliding_config() -> ClusterConfig {
        let [a, b] = FNV_COLLIDING;
        let entry = |name: &str| {
            format!(
                "    - {{name: {name}, namespace: {FNV_COLLIDING_NAMESPACE}, aws: {{policyARNs: \
                 [arn:aws:iam::aws:policy/ReadOnlyAccess]}}}}\n"
            )
        };
        let text = format!(
            "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata: {{name: {FNV_COLLIDING_CLUSTER}}}
spec:
  subnets: [{{name: a, zone: us-west-2a}}]
  serviceAccountIssuerDiscovery: {{discoveryStore: s3://demo-oidc/demo, enableAWSOIDCProvider: true}}
  iam:
    serviceAccountExternalPermissions:
{}{}{}---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: control-plane}}
spec: {{role: ControlPlane}}
",
            entry("reports"),
            entry(a),
            entry(b)
        );
        let objects = crate::document::parse_objects("spec.yaml", &text).expect("parses");
        crate::defaults::complete(
            &crate::document::config_from_objects("spec.yaml", objects).expect("config"),
        )
    }

    fn role_name_errors(naming: fn(&str, &str, &str) -> String) -> Vec<String> {
        let config = colliding_config();
        let spec = &config.cluster.spec;
        let mut errors = Vec::new();
        let mut report = Report {
            object: "Cluster/demo.example.com".into(),
            errors: &mut errors,
        };
        let permissions = &spec
            .iam
            .as_ref()
            .expect("iam")
            .service_account_external_permissions;
        check_role_names(
            &mut report,
            permissions,
            &addon_accounts(spec),
            FNV_COLLIDING_CLUSTER,
            naming,
        );
        errors.iter().map(ToString::to_string).collect()
    }

    /// With a naming whose hash collides (kops's FNV-1a, and a real colliding pair), the rule refuses the second
    /// entry, naming both by their spec paths and saying what to do.
    #[test]
    fn two_entries_under_one_role_name_are_refused_naming_both() {
        let [a, b] = FNV_COLLIDING;
        let role = kops_role_name(a, FNV_COLLIDING_NAMESPACE, FNV_COLLIDING_CLUSTER);
        assert_eq!(
            role_name_errors(kops_role_name),
            [format!(
                "Cluster/demo.example.com: spec.iam.serviceAccountExternalPermissions[2]: its IAM role would be \
                 named {role:?}, as would that of spec.iam.serviceAccountExternalPermissions[1] \
                 ({FNV_COLLIDING_NAMESPACE}/{a}): two service accounts cannot share a role (names over IAM's 64 \
                 characters are shortened, docs/irsa.md); give one of them a shorter or different name"
            )]
        );
        assert!(
            !role_name_errors(kops_role_name)[0].contains(&format!("/{b})")),
            "the refused entry is named by its path, the other by its path and account"
        );
    }

    /// Ballast's naming gives the pair kops collides on two roles, and validation accepts the spec.
    #[test]
    fn the_pair_kops_collides_on_is_valid_under_ballasts_names() {
        assert_eq!(
            role_name_errors(service_account_role_name),
            Vec::<String>::new()
        );
        let errors = crate::validate::validate(&colliding_config());
        assert!(errors.is_empty(), "{errors:?}");
    }
}
