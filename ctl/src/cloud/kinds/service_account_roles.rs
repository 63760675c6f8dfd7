//! IAM roles for service accounts (IRSA, `docs/irsa.md`): one role per entry of
//! `spec.iam.serviceAccountExternalPermissions`, and, with the OIDC provider on, one each for Ballast's own
//! AWS-calling add-ons (the cloud controller manager, the EBS CSI driver's controller, with amazon-vpc
//! networking the VPC CNI's `aws-node`, and with `spec.clusterAutoscaler.enabled` the cluster autoscaler), whose
//! statements then leave the instance roles. Each role's trust policy lets only its service account's tokens from this
//! cluster's issuer assume it (`ballast_state::irsa::trust`); names are kops's
//! (`ballast_state::irsa::naming`); managed policies are attached, the inline policy is put as `irsa`.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_iam::types::Tag;
use ballast_state::irsa::naming::service_account_role_name;
use ballast_state::irsa::trust::{inline_policy_document, service_account_trust_policy};
use ballast_state::irsa::AddonRoles;
use ballast_state::irsa::{
    addons_on_irsa, aws_node_on_irsa, IrsaSettings, ServiceAccountRef, AMAZON_VPC_CNI_ACCOUNT,
    CLOUD_CONTROLLER_MANAGER_ACCOUNT, CLUSTER_AUTOSCALER_ACCOUNT, EBS_CSI_CONTROLLER_ACCOUNT,
};
use ballast_state::spec::{ClusterSpec, Networking};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::task::{Finder, Task, Wanted};
use super::{ActualState, Known, Target};
use crate::cloud::aws::{call, find as find_call, ownership_tag};
use crate::cloud::error::UpdateError;
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage, KNOWN_AFTER_APPLY};
use crate::cloud::terraform::{
    jsonencode, reference, string_map, tf_name, value, RenderError, Resource as TfResource,
    Terraform,
};

/// The name of each role's inline policy.
pub const INLINE_POLICY_NAME: &str = "irsa";
/// Tag naming the service account a role is for (`namespace/name`): what `delete cluster` finds them by, with
/// the ownership tag.
pub const SERVICE_ACCOUNT_TAG: &str = "ballast.dev/service-account";

/// One role the cluster wants (pure).
#[derive(Debug, Clone, PartialEq)]
pub struct WantedRole {
    pub name: String,
    pub namespace: String,
    pub service_account: String,
    pub trust: Value,
    pub policy_arns: Vec<String>,
    pub inline: Option<Value>,
}

/// Every role wanted, in the spec's order, the add-ons' last; empty without the OIDC provider. `provider_arn`
/// is the OIDC provider's (`None` before it exists: the plan shows the trust as known after apply).
pub fn wanted_roles(
    wanted: Wanted<'_>,
    issuer: &str,
    provider_arn: Option<&str>,
) -> Result<Vec<WantedRole>, UpdateError> {
    let spec = &wanted.completed.cluster.spec;
    let Some(irsa) = IrsaSettings::of(spec).filter(|i| i.oidc_provider) else {
        return Ok(Vec::new());
    };
    let cluster = &wanted.model.cluster;
    let provider = provider_arn.unwrap_or(KNOWN_AFTER_APPLY);
    let role =
        |namespace: &str, name: &str, policy_arns: Vec<String>, inline: Option<Value>| WantedRole {
            name: service_account_role_name(name, namespace, cluster),
            namespace: namespace.to_string(),
            service_account: name.to_string(),
            trust: service_account_trust_policy(provider, issuer, namespace, name),
            policy_arns,
            inline,
        };
    let mut roles = Vec::new();
    for (i, permission) in irsa.permissions.iter().enumerate() {
        let aws = permission.aws.clone().unwrap_or_default();
        let inline = aws
            .inline_policy
            .as_deref()
            .map(inline_policy_document)
            .transpose()
            .map_err(|e| UpdateError::Refused {
                resource: format!("Cluster/{cluster}"),
                field: "spec.iam.serviceAccountExternalPermissions",
                message: format!("[{i}].aws.inlinePolicy: {e}"),
            })?;
        roles.push(role(
            &permission.namespace,
            &permission.name,
            aws.policy_arns,
            inline,
        ));
    }
    if addons_on_irsa(spec) {
        for (account, statements) in addon_statements(spec, cluster) {
            roles.push(role(
                account.namespace,
                account.name,
                Vec::new(),
                Some(json!({"Version": "2012-10-17", "Statement": statements})),
            ));
        }
    }
    Ok(roles)
}

/// The add-ons on IRSA and their statements (the same `ctl/src/cloud/ccm.rs` and `ctl/src/cloud/ebs_csi.rs`
/// give the control-plane role without IRSA, and `ctl/src/cloud/cni.rs` both instance roles for amazon-vpc).
pub fn addon_statements(spec: &ClusterSpec, cluster: &str) -> Vec<(ServiceAccountRef, Vec<Value>)> {
    let mut addons = vec![
        (
            CLOUD_CONTROLLER_MANAGER_ACCOUNT,
            crate::cloud::ccm::ccm_iam_statements(
                cluster,
                spec.networking == Some(ballast_state::spec::Networking::Kubenet),
            ),
        ),
        (
            EBS_CSI_CONTROLLER_ACCOUNT,
            crate::cloud::ebs_csi::ebs_csi_iam_statements(cluster),
        ),
    ];
    if aws_node_on_irsa(spec) {
        addons.push((
            AMAZON_VPC_CNI_ACCOUNT,
            crate::cloud::cni::cni_iam_statements(Networking::AmazonVpc, cluster),
        ));
    }
    if ballast_state::autoscaler::enabled(spec) {
        addons.push((
            CLUSTER_AUTOSCALER_ACCOUNT,
            crate::cloud::autoscaler::autoscaler_iam_statements(cluster),
        ));
    }
    addons
}

/// The add-ons' role ARNs, from the account and partition of the cluster's instance profiles (`Known`):
/// known before the roles exist, so the node specs name them in the same run.
pub fn addon_roles(wanted: Wanted<'_>, known: &Known) -> Option<AddonRoles> {
    if !addons_on_irsa(&wanted.completed.cluster.spec) {
        return None;
    }
    let profile = known.account_arn()?;
    // arn:PARTITION:iam::ACCOUNT:instance-profile/NAME
    let mut parts = profile.split(':');
    let (partition, account) = (parts.nth(1)?, parts.nth(2)?);
    let arn = |account_ref: ServiceAccountRef| {
        format!(
            "arn:{partition}:iam::{account}:role/{}",
            service_account_role_name(
                account_ref.name,
                account_ref.namespace,
                &wanted.model.cluster
            )
        )
    };
    Some(AddonRoles {
        cloud_controller_manager: Some(arn(CLOUD_CONTROLLER_MANAGER_ACCOUNT)),
        ebs_csi_controller: Some(arn(EBS_CSI_CONTROLLER_ACCOUNT)),
        aws_node: aws_node_on_irsa(&wanted.completed.cluster.spec)
            .then(|| arn(AMAZON_VPC_CNI_ACCOUNT)),
        cluster_autoscaler: ballast_state::autoscaler::enabled(&wanted.completed.cluster.spec)
            .then(|| arn(CLUSTER_AUTOSCALER_ACCOUNT)),
    })
}

/// One role as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FoundRole {
    pub arn: String,
    /// The trust policy, decoded.
    pub trust: String,
    #[serde(default)]
    pub policy_arns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    pub owned: bool,
    /// Its [`SERVICE_ACCOUNT_TAG`]: the service account it was made for (`namespace/name`), if tagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// By role name.
    #[serde(default)]
    pub roles: BTreeMap<String, FoundRole>,
    /// Roles this cluster made for a service account the spec no longer lists (tagged `owned` by the cluster
    /// and with [`SERVICE_ACCOUNT_TAG`]), by name: each is deleted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stale: BTreeMap<String, StaleRole>,
}

/// A role of a service account no longer in the spec, with what must go before it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaleRole {
    /// `namespace/name`, from its [`SERVICE_ACCOUNT_TAG`].
    pub service_account: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inline_policies: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_arns: Vec<String>,
}

/// A role tagged with [`SERVICE_ACCOUNT_TAG`], and all its tags: what `update cluster` prunes and `delete
/// cluster` deletes are among these, decided by the cluster's ownership tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedRole {
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// A role name that may be a service account's: `<name>.<namespace>.sa.<cluster>`, or one shortened to IAM's
/// limit (its `.sa.` may be cut off). Only a candidate: its tags decide.
fn may_be_service_account_role(name: &str) -> bool {
    name.contains(".sa.") || name.len() == ballast_state::limits::IAM_MAX_ROLE_NAME_CHARS
}

/// Every role of the account that carries [`SERVICE_ACCOUNT_TAG`] (of any cluster, or none): IAM cannot list
/// roles by tag, so the candidates by name are asked for their tags (`ListRoleTags`).
pub async fn roles_tagged_for_service_accounts(
    iam: &aws_sdk_iam::Client,
    cluster: &str,
) -> Result<Vec<TaggedRole>, UpdateError> {
    let mut names = Vec::new();
    let mut pages = iam.list_roles().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| {
            crate::cloud::aws::failure(&format!("IAM roles of {cluster}"), "ListRoles", e)
        })?;
        names.extend(
            page.roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .filter(|n| may_be_service_account_role(n)),
        );
    }
    let mut found = Vec::new();
    for name in names {
        let resource = format!("IamRole {name}");
        let Some(listed) = find_call(&resource, "ListRoleTags", &["NoSuchEntity"], || {
            iam.list_role_tags().role_name(&name).send()
        })
        .await?
        else {
            continue;
        };
        let tags: BTreeMap<String, String> = listed
            .tags()
            .iter()
            .map(|t| (t.key().to_string(), t.value().to_string()))
            .collect();
        if tags.contains_key(SERVICE_ACCOUNT_TAG) {
            found.push(TaggedRole { name, tags });
        }
    }
    Ok(found)
}

/// A role to create or repair, or one to delete.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Role(Box<RoleChange>),
    /// Its service account left `spec.iam.serviceAccountExternalPermissions` (or the provider was turned off).
    Delete {
        name: String,
        stale: StaleRole,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct RoleChange {
    pub role: WantedRole,
    /// `None`: the role is created.
    pub found: Option<FoundRole>,
    pub trust: bool,
    pub attach: Vec<String>,
    pub detach: Vec<String>,
    pub inline: bool,
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        match self {
            Change::Role(change) => change.planned(),
            Change::Delete { name, stale } => {
                vec![
                    PlanChange::new(Stage::SecurityAndIam, Kind::IamRole, name, Action::Delete)
                        .field(
                            "serviceAccount",
                            Some(stale.service_account.clone()),
                            "(no longer in spec.iam.serviceAccountExternalPermissions)",
                        ),
                ]
            }
        }
    }
}

impl RoleChange {
    fn planned(&self) -> Vec<PlanChange> {
        let account = format!("{}/{}", self.role.namespace, self.role.service_account);
        let mut change = PlanChange::new(
            Stage::SecurityAndIam,
            Kind::IamRole,
            &self.role.name,
            if self.found.is_some() {
                Action::Update
            } else {
                Action::Create
            },
        );
        if self.found.is_none() {
            change = change.field("serviceAccount", None, account);
        }
        if self.trust {
            change = change.field(
                "trust",
                self.found.as_ref().map(|_| "(other)".to_string()),
                "sts:AssumeRoleWithWebIdentity",
            );
        }
        if !self.attach.is_empty() || !self.detach.is_empty() {
            change = change.field(
                "policyARNs",
                (!self.detach.is_empty()).then(|| format!("-[{}]", self.detach.join(","))),
                format!("+[{}]", self.attach.join(",")),
            );
        }
        if self.inline {
            let hash = self
                .role
                .inline
                .as_ref()
                .map(|v| ballast_state::digest::sha256_hex(v.to_string().as_bytes()))
                .unwrap_or_else(|| "(none)".to_string());
            change = change.field(
                INLINE_POLICY_NAME,
                self.found
                    .as_ref()
                    .and_then(|f| f.inline.as_ref())
                    .map(|_| "(other)".to_string()),
                &hash[..12.min(hash.len())],
            );
        }
        vec![change]
    }
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::String(text.to_string()))
}

fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

fn issuer_and_provider(known: &Known) -> Option<(String, Option<String>)> {
    let issuer = known.service_account_issuer.as_ref()?.issuer.clone();
    Some((issuer, known.oidc_provider_arn.clone()))
}

async fn find(finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
    let Some((issuer, provider)) = issuer_and_provider(finder.known) else {
        return Ok(Actual::default());
    };
    let iam = &finder.cloud.iam;
    let key = ownership_tag(&wanted.model.cluster);
    let mut actual = Actual::default();
    for role in wanted_roles(wanted, &issuer, provider.as_deref())? {
        let name = &role.name;
        let Some(found) = find_call(name, "GetRole", &["NoSuchEntity"], || {
            iam.get_role().role_name(name).send()
        })
        .await?
        else {
            continue;
        };
        let Some(aws_role) = found.role() else {
            continue;
        };
        let attached = call(name, "ListAttachedRolePolicies", || {
            iam.list_attached_role_policies().role_name(name).send()
        })
        .await?;
        let inline = find_call(name, "GetRolePolicy", &["NoSuchEntity"], || {
            iam.get_role_policy()
                .role_name(name)
                .policy_name(INLINE_POLICY_NAME)
                .send()
        })
        .await?;
        actual.roles.insert(
            name.clone(),
            FoundRole {
                arn: aws_role.arn().to_string(),
                trust: aws_role
                    .assume_role_policy_document()
                    .map(decode)
                    .unwrap_or_default(),
                policy_arns: attached
                    .attached_policies()
                    .iter()
                    .filter_map(|p| p.policy_arn().map(str::to_string))
                    .collect(),
                inline: inline.map(|p| decode(p.policy_document())),
                owned: aws_role
                    .tags()
                    .iter()
                    .any(|t| t.key() == key && t.value() == "owned"),
                service_account: aws_role
                    .tags()
                    .iter()
                    .find(|t| t.key() == SERVICE_ACCOUNT_TAG)
                    .map(|t| t.value().to_string()),
            },
        );
    }
    // The cluster's roles of service accounts no longer wanted: owned by this cluster alone (a role another
    // cluster also claims, or one without the ownership tag, is never touched).
    let wanted_names: BTreeSet<String> = wanted_roles(wanted, &issuer, provider.as_deref())?
        .into_iter()
        .map(|r| r.name)
        .collect();
    for tagged in roles_tagged_for_service_accounts(iam, &wanted.model.cluster).await? {
        let others_claim = tagged
            .tags
            .keys()
            .any(|k| k.starts_with("kubernetes.io/cluster/") && *k != key);
        if tagged.tags.get(&key).map(String::as_str) != Some("owned")
            || others_claim
            || wanted_names.contains(&tagged.name)
        {
            continue;
        }
        let name = &tagged.name;
        let resource = format!("IamRole {name}");
        let inline = call(&resource, "ListRolePolicies", || {
            iam.list_role_policies().role_name(name).send()
        })
        .await?;
        let attached = call(&resource, "ListAttachedRolePolicies", || {
            iam.list_attached_role_policies().role_name(name).send()
        })
        .await?;
        actual.stale.insert(
            name.clone(),
            StaleRole {
                service_account: tagged.tags[SERVICE_ACCOUNT_TAG].clone(),
                inline_policies: inline.policy_names().to_vec(),
                policy_arns: attached
                    .attached_policies()
                    .iter()
                    .filter_map(|p| p.policy_arn().map(str::to_string))
                    .collect(),
            },
        );
    }
    Ok(actual)
}

fn diff(wanted: Wanted<'_>, known: &Known, actual: &Actual) -> Result<Vec<Change>, UpdateError> {
    let Some((issuer, provider)) = issuer_and_provider(known) else {
        return Ok(Vec::new());
    };
    let mut changes = Vec::new();
    for role in wanted_roles(wanted, &issuer, provider.as_deref())? {
        let Some(found) = actual.roles.get(&role.name) else {
            changes.push(Change::Role(Box::new(RoleChange {
                attach: role.policy_arns.clone(),
                detach: Vec::new(),
                trust: true,
                inline: role.inline.is_some(),
                found: None,
                role,
            })));
            continue;
        };
        if !found.owned {
            return Err(UpdateError::Refused {
                resource: format!("IamRole {}", role.name),
                field: "spec.iam.serviceAccountExternalPermissions",
                message: "exists without this cluster's ownership tag: Ballast changes only roles it made; \
                          delete or rename that role"
                    .to_string(),
            });
        }
        let account = format!("{}/{}", role.namespace, role.service_account);
        if let Some(tagged) = found.service_account.as_deref().filter(|t| *t != account) {
            return Err(UpdateError::Refused {
                resource: format!("IamRole {}", role.name),
                field: "spec.iam.serviceAccountExternalPermissions",
                message: format!(
                    "is the role of service account {account}, but it is tagged {SERVICE_ACCOUNT_TAG}={tagged}: \
                     it was made for another service account, and Ballast neither adopts nor rewrites it. Find \
                     what uses it (its trust and policies are {tagged}'s), then delete that role or give {account} \
                     another name"
                ),
            });
        }
        let have: BTreeSet<&String> = found.policy_arns.iter().collect();
        let want: BTreeSet<&String> = role.policy_arns.iter().collect();
        let change = RoleChange {
            trust: parse(&found.trust) != role.trust,
            attach: want.difference(&have).map(|s| s.to_string()).collect(),
            detach: have.difference(&want).map(|s| s.to_string()).collect(),
            inline: found.inline.as_deref().map(parse) != role.inline,
            found: Some(found.clone()),
            role,
        };
        if change.trust || change.inline || !change.attach.is_empty() || !change.detach.is_empty() {
            changes.push(Change::Role(Box::new(change)));
        }
    }
    for (name, stale) in &actual.stale {
        changes.push(Change::Delete {
            name: name.clone(),
            stale: stale.clone(),
        });
    }
    Ok(changes)
}

async fn apply(target: &Target<'_>, changes: &[Change]) -> Result<(), UpdateError> {
    let iam = &target.cloud.iam;
    let boundary = target
        .model
        .roles
        .iter()
        .find_map(|r| r.permissions_boundary.clone());
    for change in changes {
        let change = match change {
            Change::Role(change) => change,
            Change::Delete { name, stale } => {
                // Policies detached and deleted first, then the role (kinds::iam::delete_role, as delete
                // cluster does); a role already gone is not an error.
                let resource = super::deletion::Resource::new(
                    super::deletion::ResourceKind::IamRole,
                    name,
                    &format!("service account {}", stale.service_account),
                )
                .with_parts(
                    stale
                        .inline_policies
                        .iter()
                        .chain(&stale.policy_arns)
                        .cloned()
                        .collect(),
                );
                super::iam::delete_role(target.cloud, &resource)
                    .await
                    .map_err(|failed| failed.error)?;
                continue;
            }
        };
        let role = &change.role;
        let name = &role.name;
        let trust = role.trust.to_string();
        match &change.found {
            None => {
                let mut tags = target.tags_named(name);
                tags.insert(
                    SERVICE_ACCOUNT_TAG.to_string(),
                    format!("{}/{}", role.namespace, role.service_account),
                );
                let tags: Vec<Tag> = tags
                    .into_iter()
                    .filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok())
                    .collect();
                call(name, "CreateRole", || {
                    iam.create_role()
                        .role_name(name)
                        .assume_role_policy_document(&trust)
                        .description(format!(
                            "IRSA: service account {}/{} of cluster {}",
                            role.namespace, role.service_account, target.model.cluster
                        ))
                        .set_permissions_boundary(boundary.clone())
                        .set_tags(Some(tags.clone()))
                        .send()
                })
                .await?;
            }
            Some(_) if change.trust => {
                call(name, "UpdateAssumeRolePolicy", || {
                    iam.update_assume_role_policy()
                        .role_name(name)
                        .policy_document(&trust)
                        .send()
                })
                .await?;
            }
            Some(_) => {}
        }
        for arn in &change.attach {
            call(name, "AttachRolePolicy", || {
                iam.attach_role_policy()
                    .role_name(name)
                    .policy_arn(arn)
                    .send()
            })
            .await?;
        }
        for arn in &change.detach {
            call(name, "DetachRolePolicy", || {
                iam.detach_role_policy()
                    .role_name(name)
                    .policy_arn(arn)
                    .send()
            })
            .await?;
        }
        if change.inline {
            match &role.inline {
                Some(document) => {
                    let document = document.to_string();
                    call(name, "PutRolePolicy", || {
                        iam.put_role_policy()
                            .role_name(name)
                            .policy_name(INLINE_POLICY_NAME)
                            .policy_document(&document)
                            .send()
                    })
                    .await?;
                }
                None => {
                    call(name, "DeleteRolePolicy", || {
                        iam.delete_role_policy()
                            .role_name(name)
                            .policy_name(INLINE_POLICY_NAME)
                            .send()
                    })
                    .await?;
                }
            }
        }
    }
    Ok(())
}

/// Nothing of their own: a service account's role is an IAM role, found by the cluster's tag and deleted
/// (policies first) as one.
impl super::task::Delete for ServiceAccountRolesTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::With(&[super::deletion::ResourceKind::IamRole])
    }

    fn delete<'a>(
        &'a self,
        _deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move { Err(super::task::not_deleted_here(resource)) })
    }
}

/// A managed policy's attachment's Terraform name: the role's, then 8 hex digits of the policy ARN's sha256
/// (stable whatever the order of `policyARNs`, and distinct for two policies of one role).
pub fn attachment_name(role: &str, policy_arn: &str) -> String {
    let hash = ballast_state::digest::sha256_hex(policy_arn.as_bytes());
    tf_name(&format!("{role}-{}", &hash[..8]))
}

/// The service accounts' roles as a [`Task`].
pub struct ServiceAccountRolesTask;

impl Task for ServiceAccountRolesTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.service_account_roles
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.service_account_roles = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder, wanted).await
    }

    fn learn(
        &self,
        wanted: Wanted<'_>,
        _actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        known.addon_roles = addon_roles(wanted, known);
        Ok(())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        diff(wanted, known, actual)
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes).await
    }

    /// Each role as the direct apply makes it: `aws_iam_role` (trust policy as `jsonencode`, so the provider's
    /// ARN is a reference; description, permissions boundary and tags as `CreateRole` gets them), its inline
    /// policy as `aws_iam_role_policy` named `irsa`, each managed policy as an `aws_iam_role_policy_attachment`,
    /// and kops's outputs `<namespace>-<name>_role_arn` / `_role_name`. Only creations: the plan is against a
    /// state with no role, so a role to delete (a service account left the spec) never arises here; Terraform's
    /// own state deletes what its files no longer declare.
    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[Change],
        _known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        let boundary = wanted
            .model
            .roles
            .iter()
            .find_map(|r| r.permissions_boundary.clone());
        for change in changes {
            let change = match change {
                Change::Role(change) if change.found.is_none() => change,
                Change::Role(change) => {
                    return Err(RenderError::NotACreate {
                        resource: format!("IamRole {}", change.role.name),
                        action: "an update",
                    })
                }
                Change::Delete { name, .. } => {
                    return Err(RenderError::NotACreate {
                        resource: format!("IamRole {name}"),
                        action: "a deletion",
                    })
                }
            };
            let role = &change.role;
            let tf = tf_name(&role.name);
            let account = format!("{}/{}", role.namespace, role.service_account);
            let mut tags = super::tags_named(wanted.model, &role.name);
            tags.insert(SERVICE_ACCOUNT_TAG.to_string(), account.clone());
            let mut body = TfResource::new()
                .attr("assume_role_policy", jsonencode(&role.trust))
                .attr(
                    "description",
                    format!(
                        "IRSA: service account {account} of cluster {}",
                        wanted.model.cluster
                    ),
                )
                .attr("name", role.name.as_str());
            if let Some(boundary) = &boundary {
                body = body.attr("permissions_boundary", boundary.as_str());
            }
            terraform.resource("aws_iam_role", &tf, body.attr("tags", string_map(&tags)))?;
            let role_name = value(&reference("aws_iam_role", &tf, "name"));
            if let Some(document) = &role.inline {
                // The same text `PutRolePolicy` gets (the plan's hash is of it); it names no reference.
                terraform.resource(
                    "aws_iam_role_policy",
                    &tf,
                    TfResource::new()
                        .attr("name", INLINE_POLICY_NAME)
                        .attr("policy", hcl::Expression::String(document.to_string()))
                        .attr("role", role_name.clone()),
                )?;
            }
            for arn in &change.attach {
                terraform.resource(
                    "aws_iam_role_policy_attachment",
                    &attachment_name(&role.name, arn),
                    TfResource::new()
                        .attr("policy_arn", arn.as_str())
                        .attr("role", role_name.clone()),
                )?;
            }
            let output = tf_name(&format!("{}-{}", role.namespace, role.service_account));
            terraform.output(
                &format!("{output}_role_arn"),
                value(&reference("aws_iam_role", &tf, "arn")),
            );
            terraform.output(&format!("{output}_role_name"), role_name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use ballast_state::defaults::complete;
    use ballast_state::document::{config_from_objects, parse_objects};
    use ballast_state::irsa::IssuerSettings;
    use ballast_state::spec::{ClusterConfig, Role};

    use super::*;
    use crate::cloud::model::{cluster_model, ClusterModel, StateLocation};

    const SPEC: &str = "
apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata: {name: demo.example.com}
spec:
  subnets: [{name: a, zone: us-west-2a}]
  serviceAccountIssuerDiscovery: {discoveryStore: s3://demo-oidc/demo.example.com, enableAWSOIDCProvider: true}
  iam:
    serviceAccountExternalPermissions:
    - name: reports
      namespace: team-a
      aws:
        policyARNs: [arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess]
        inlinePolicy: '[{\"Effect\": \"Allow\", \"Action\": [\"s3:PutObject\"], \"Resource\": [\"arn:aws:s3:::r/*\"]}]'
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {name: control-plane}
spec: {role: ControlPlane}
";

    fn load(text: &str) -> (ClusterConfig, ClusterModel) {
        let objects = parse_objects("spec", text).expect("parses");
        let completed = complete(&config_from_objects("spec", objects).expect("a cluster"));
        let state = StateLocation::from_url("s3://state/clusters").expect("s3");
        let model = cluster_model(&completed, &state);
        (completed, model)
    }

    fn statements(model: &ClusterModel, role: Role) -> Vec<Value> {
        let policy = &model
            .roles
            .iter()
            .find(|r| r.role == role)
            .expect("role")
            .policy;
        let policy: Value = serde_json::from_str(policy).expect("JSON");
        policy["Statement"].as_array().expect("statements").clone()
    }

    /// With the OIDC provider on, the control-plane instance role loses the cloud controller manager's and the
    /// EBS CSI driver's statements, exactly those, and they are the add-on roles' inline policies; the nodes'
    /// role is unchanged.
    #[test]
    fn the_addons_statements_move_from_the_instance_role_to_their_roles() {
        let (completed, with_irsa) = load(SPEC);
        let without = SPEC.replace(
            "enableAWSOIDCProvider: true",
            "enableAWSOIDCProvider: false",
        );
        let without = without.split("  iam:").next().expect("head").to_string()
            + "---"
            + SPEC.split("---").nth(1).expect("group");
        let (_, without_irsa) = load(&without);
        let moved: Vec<Value> = addon_statements(&completed.cluster.spec, "demo.example.com")
            .into_iter()
            .flat_map(|(_, statements)| statements)
            .collect();
        let mut expected = statements(&with_irsa, Role::ControlPlane);
        let kept = statements(&without_irsa, Role::ControlPlane);
        for statement in &moved {
            assert!(
                kept.contains(statement),
                "without IRSA the role has {statement}"
            );
            assert!(
                !expected.contains(statement),
                "with IRSA the role still has {statement}"
            );
        }
        expected.extend(moved.iter().cloned());
        let sorted = |mut v: Vec<Value>| {
            v.sort_by_key(|s| s.to_string());
            v
        };
        assert_eq!(
            sorted(expected),
            sorted(kept),
            "only the add-ons' statements move"
        );
        assert_eq!(
            statements(&with_irsa, Role::Node),
            statements(&without_irsa, Role::Node)
        );

        let wanted = Wanted {
            model: &with_irsa,
            completed: &completed,
        };
        let issuer = "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";
        let provider =
            "arn:aws:iam::123456789012:oidc-provider/demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";
        let roles = wanted_roles(wanted, issuer, Some(provider)).expect("roles");
        let names: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "reports.team-a.sa.demo.example.com",
                "cloud-controller-manager.kube-system.sa.demo.example.com",
                "ebs-csi-controller-sa.kube-system.sa.demo.example.com",
            ]
        );
        let addon_inline: Vec<Value> = roles[1..]
            .iter()
            .flat_map(|r| {
                r.inline.as_ref().expect("inline")["Statement"]
                    .as_array()
                    .expect("statements")
                    .clone()
            })
            .collect();
        assert_eq!(addon_inline, moved);

        // Goldens of the trust policies and inline documents.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/irsa-trust");
        let mut failures = Vec::new();
        for role in &roles {
            let document =
                json!({"trust": role.trust, "policyARNs": role.policy_arns, "inline": role.inline});
            let text = serde_json::to_string_pretty(&document).expect("JSON") + "\n";
            if let Err(e) = ballast_testutil::check(&dir.join(format!("{}.json", role.name)), &text)
            {
                failures.push(e.to_string());
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));

        // Their ARNs, from the instance profiles' account, reach the node spec.
        let mut known = Known::default();
        known.profile_arns.insert(
            Role::ControlPlane,
            "arn:aws:iam::123456789012:instance-profile/control-plane.demo.example.com".into(),
        );
        let arns = addon_roles(wanted, &known).expect("add-ons on IRSA");
        assert_eq!(
            arns.cloud_controller_manager.as_deref(),
            Some("arn:aws:iam::123456789012:role/cloud-controller-manager.kube-system.sa.demo.example.com")
        );
    }

    /// With amazon-vpc networking and the OIDC provider on, the VPC CNI's ENI statements leave both instance
    /// roles (exactly those) for the role of `kube-system/aws-node`, whose ARN reaches the node spec; without the
    /// provider both instance roles keep them. Golden: the aws-node role's trust and inline policy.
    #[test]
    fn the_vpc_cnis_statements_move_from_both_instance_roles_to_aws_nodes_role() {
        let amazon_vpc = SPEC.replace(
            "  subnets: [{name: a, zone: us-west-2a}]",
            "  subnets: [{name: a, zone: us-west-2a}]\n  networking: amazon-vpc",
        );
        let (completed, with_irsa) = load(&amazon_vpc);
        let (_, without_irsa) = load(&amazon_vpc.replace(
            "enableAWSOIDCProvider: true",
            "enableAWSOIDCProvider: false",
        ));
        let cni = crate::cloud::cni::cni_iam_statements(Networking::AmazonVpc, "demo.example.com");
        assert!(!cni.is_empty());
        for role in [Role::ControlPlane, Role::Node] {
            let kept = statements(&without_irsa, role);
            let left = statements(&with_irsa, role);
            for statement in &cni {
                assert!(
                    kept.contains(statement),
                    "{role:?} without IRSA lacks {statement}"
                );
                assert!(
                    !left.contains(statement),
                    "{role:?} with IRSA keeps {statement}"
                );
            }
            if role == Role::Node {
                // The node role loses the CNI's statements and nothing else.
                let mut rest = kept.clone();
                rest.retain(|s| !cni.contains(s));
                assert_eq!(rest, left, "the node role keeps all but the CNI's");
            }
        }
        let wanted = Wanted {
            model: &with_irsa,
            completed: &completed,
        };
        let issuer = "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";
        let provider =
            "arn:aws:iam::123456789012:oidc-provider/demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";
        let roles = wanted_roles(wanted, issuer, Some(provider)).expect("roles");
        let aws_node = roles
            .iter()
            .find(|r| r.name == "aws-node.kube-system.sa.demo.example.com")
            .expect("aws-node's role");
        assert_eq!(
            aws_node.inline.as_ref().expect("inline")["Statement"],
            Value::Array(cni.clone())
        );
        assert_eq!(
            aws_node.trust["Statement"][0]["Condition"]["StringEquals"]
                ["demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com:sub"],
            "system:serviceaccount:kube-system:aws-node"
        );
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/irsa-trust");
        let document = json!({"trust": aws_node.trust, "policyARNs": aws_node.policy_arns, "inline": aws_node.inline});
        let text = serde_json::to_string_pretty(&document).expect("JSON") + "\n";
        ballast_testutil::check(&dir.join(format!("{}.json", aws_node.name)), &text)
            .unwrap_or_else(|e| panic!("{e}"));

        let mut known = Known::default();
        known.profile_arns.insert(
            Role::Node,
            "arn:aws:iam::123456789012:instance-profile/nodes.demo.example.com".into(),
        );
        assert_eq!(
            addon_roles(wanted, &known)
                .expect("on IRSA")
                .aws_node
                .as_deref(),
            Some("arn:aws:iam::123456789012:role/aws-node.kube-system.sa.demo.example.com")
        );
        // Cilium (SPEC's default): no aws-node role, no ARN.
        let (completed, model) = load(SPEC);
        let wanted = Wanted {
            model: &model,
            completed: &completed,
        };
        assert!(wanted_roles(wanted, issuer, Some(provider))
            .expect("roles")
            .iter()
            .all(|r| r.service_account != "aws-node"));
        assert_eq!(addon_roles(wanted, &known).expect("on IRSA").aws_node, None);
    }

    /// With the autoscaler on and the OIDC provider on, its statements leave the control-plane role (exactly
    /// those) for the role of `kube-system/cluster-autoscaler`, whose ARN reaches the node spec; without the
    /// provider the control-plane role keeps them; with the autoscaler off there is no role and no ARN.
    #[test]
    fn the_autoscalers_statements_move_from_the_control_plane_role_to_its_own() {
        let on = SPEC.replace(
            "  subnets: [{name: a, zone: us-west-2a}]",
            "  subnets: [{name: a, zone: us-west-2a}]\n  clusterAutoscaler: {enabled: true}",
        );
        let (completed, with_irsa) = load(&on);
        let (_, without_irsa) = load(&on.replace(
            "enableAWSOIDCProvider: true",
            "enableAWSOIDCProvider: false",
        ));
        let autoscaler = crate::cloud::autoscaler::autoscaler_iam_statements("demo.example.com");
        let kept = statements(&without_irsa, Role::ControlPlane);
        let left = statements(&with_irsa, Role::ControlPlane);
        for statement in &autoscaler {
            assert!(kept.contains(statement), "without IRSA lacks {statement}");
            assert!(!left.contains(statement), "with IRSA keeps {statement}");
        }
        let wanted = Wanted {
            model: &with_irsa,
            completed: &completed,
        };
        let issuer = "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";
        let provider =
            "arn:aws:iam::123456789012:oidc-provider/demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";
        let roles = wanted_roles(wanted, issuer, Some(provider)).expect("roles");
        let role = roles
            .iter()
            .find(|r| r.name == "cluster-autoscaler.kube-system.sa.demo.example.com")
            .expect("the autoscaler's role");
        assert_eq!(
            role.inline.as_ref().expect("inline")["Statement"],
            Value::Array(autoscaler.clone())
        );
        assert_eq!(
            role.trust["Statement"][0]["Condition"]["StringEquals"]
                ["demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com:sub"],
            "system:serviceaccount:kube-system:cluster-autoscaler"
        );
        let mut known = Known::default();
        known.profile_arns.insert(
            Role::ControlPlane,
            "arn:aws:iam::123456789012:instance-profile/control-plane.demo.example.com".into(),
        );
        assert_eq!(
            addon_roles(wanted, &known)
                .expect("on IRSA")
                .cluster_autoscaler
                .as_deref(),
            Some(
                "arn:aws:iam::123456789012:role/cluster-autoscaler.kube-system.sa.demo.example.com"
            )
        );
        // Off (SPEC): no role, no ARN.
        let (completed, model) = load(SPEC);
        let wanted = Wanted {
            model: &model,
            completed: &completed,
        };
        assert!(wanted_roles(wanted, issuer, Some(provider))
            .expect("roles")
            .iter()
            .all(|r| r.service_account != "cluster-autoscaler"));
        assert_eq!(
            addon_roles(wanted, &known)
                .expect("on IRSA")
                .cluster_autoscaler,
            None
        );
    }

    #[test]
    fn service_account_role_names_and_shortened_ones_are_candidates() {
        assert!(may_be_service_account_role("app.default.sa.c.example.com"));
        assert!(may_be_service_account_role(&"x".repeat(64)));
        assert!(!may_be_service_account_role("control-plane.c.example.com"));
        assert!(!may_be_service_account_role("nodes.c.example.com"));
    }

    /// A role `find` reported stale (its service account left the spec) is one deletion in the plan, printed
    /// with the service account it was for and without "only with --prune" (it goes with `--yes`); the wanted
    /// roles are untouched.
    #[test]
    fn a_stale_role_is_planned_as_a_deletion() {
        let (completed, model) = load(SPEC);
        let wanted = Wanted {
            model: &model,
            completed: &completed,
        };
        let issuer = "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";
        let known = Known {
            service_account_issuer: Some(IssuerSettings::published(
                issuer,
                ballast_state::node::CLUSTER_DOMAIN,
            )),
            oidc_provider_arn: Some("arn:aws:iam::1:oidc-provider/x".into()),
            ..Known::default()
        };
        let mut actual = Actual::default();
        for role in wanted_roles(wanted, issuer, known.oidc_provider_arn.as_deref()).expect("roles")
        {
            actual.roles.insert(
                role.name.clone(),
                FoundRole {
                    arn: format!("arn:aws:iam::1:role/{}", role.name),
                    trust: role.trust.to_string(),
                    policy_arns: role.policy_arns.clone(),
                    inline: role.inline.as_ref().map(Value::to_string),
                    owned: true,
                    service_account: Some(format!("{}/{}", role.namespace, role.service_account)),
                },
            );
        }
        let stale = StaleRole {
            service_account: "team-b/uploader".into(),
            inline_policies: vec![INLINE_POLICY_NAME.into()],
            policy_arns: vec!["arn:aws:iam::aws:policy/ReadOnlyAccess".into()],
        };
        actual
            .stale
            .insert("uploader.team-b.sa.demo.example.com".into(), stale.clone());
        let changes = diff(wanted, &known, &actual).expect("diff");
        assert_eq!(
            changes,
            [Change::Delete {
                name: "uploader.team-b.sa.demo.example.com".into(),
                stale
            }]
        );
        let mut plan = crate::cloud::plan::Plan::default();
        for change in &changes {
            plan.changes.extend(change.planned());
        }
        let text = plan.to_string();
        assert!(
            text.contains(
                "  - IamRole uploader.team-b.sa.demo.example.com\n        serviceAccount: team-b/uploader -> (no longer in spec.iam.serviceAccountExternalPermissions)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("--prune"), "{text}");
    }

    /// A role found as wanted changes nothing; a changed trust, a detached policy and a different inline policy
    /// are each one change; a role without the ownership tag, or tagged as another service account's, is refused.
    #[test]
    fn a_second_run_changes_nothing_and_drift_is_repaired() {
        let (completed, model) = load(SPEC);
        let wanted = Wanted {
            model: &model,
            completed: &completed,
        };
        let mut known = Known {
            service_account_issuer: Some(IssuerSettings::published(
                "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com",
                ballast_state::node::CLUSTER_DOMAIN,
            )),
            oidc_provider_arn: Some("arn:aws:iam::1:oidc-provider/x".into()),
            ..Known::default()
        };
        let roles = wanted_roles(
            wanted,
            "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com",
            known.oidc_provider_arn.as_deref(),
        )
        .expect("roles");
        let mut actual = Actual::default();
        for role in &roles {
            actual.roles.insert(
                role.name.clone(),
                FoundRole {
                    arn: format!("arn:aws:iam::1:role/{}", role.name),
                    trust: role.trust.to_string(),
                    policy_arns: role.policy_arns.clone(),
                    inline: role.inline.as_ref().map(Value::to_string),
                    owned: true,
                    service_account: Some(format!("{}/{}", role.namespace, role.service_account)),
                },
            );
        }
        assert!(diff(wanted, &known, &actual).expect("diff").is_empty());
        let name = "reports.team-a.sa.demo.example.com";
        let found = actual.roles.get_mut(name).expect("found");
        found.policy_arns.clear();
        found.inline = None;
        found.trust = "{}".into();
        let changes = diff(wanted, &known, &actual).expect("diff");
        assert_eq!(changes.len(), 1);
        let Change::Role(change) = &changes[0] else {
            panic!("a repair: {changes:?}");
        };
        assert!(change.trust && change.inline);
        assert_eq!(
            change.attach,
            ["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"]
        );
        // Tagged as another service account's: refused, naming the role and both accounts.
        actual.roles.get_mut(name).expect("found").service_account = Some("team-b/admin".into());
        let refused = diff(wanted, &known, &actual)
            .expect_err("another account's role")
            .to_string();
        for part in [
            name,
            "team-a/reports",
            "ballast.dev/service-account=team-b/admin",
        ] {
            assert!(refused.contains(part), "{part} in: {refused}");
        }
        // Untagged (a role kops made for it): its own, repaired as above.
        actual.roles.get_mut(name).expect("found").service_account = None;
        assert_eq!(diff(wanted, &known, &actual).expect("diff").len(), 1);
        actual.roles.get_mut(name).expect("found").owned = false;
        assert!(diff(wanted, &known, &actual).is_err());
        known.service_account_issuer = None;
        assert!(diff(wanted, &known, &actual).expect("no issuer").is_empty());
    }
}
