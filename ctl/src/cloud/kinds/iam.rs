//! IAM, per role: the role (trusting EC2), its inline policy `ballast`, and its instance profile. Found by their
//! deterministic names.

use std::collections::BTreeMap;

use ballast_state::digest::sha256_hex;
use serde::{Deserialize, Serialize};

use super::{ActualState, Known, Target};
use crate::cloud::aws::{call, find as find_optional};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::{ClusterModel, IamRoleModel};
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// The name of every role's inline policy.
const POLICY_NAME: &str = "ballast";

/// An instance profile as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    pub arn: String,
    /// Names of the roles in it.
    #[serde(default)]
    pub roles: Vec<String>,
}

/// One role's IAM resources as found. Policy documents are kept decoded (IAM returns them URL-encoded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoleActual {
    #[serde(default)]
    pub exists: bool,
    #[serde(default)]
    pub trust_policy: Option<String>,
    /// The inline policy `ballast`, if the role has it.
    #[serde(default)]
    pub policy: Option<String>,
    #[serde(default)]
    pub profile: Option<Profile>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// By role name; a role left out has nothing.
    #[serde(default)]
    pub roles: BTreeMap<String, RoleActual>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    CreateRole(IamRoleModel),
    UpdateTrust(IamRoleModel),
    PutPolicy {
        role: IamRoleModel,
        exists: bool,
    },
    /// Creates the profile when `create`, and puts the role in it.
    Profile {
        role: IamRoleModel,
        create: bool,
    },
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let stage = Stage::SecurityAndIam;
        let change = match self {
            Change::CreateRole(role) => {
                PlanChange::new(stage, Kind::IamRole, &role.name, Action::Create).field(
                    "trust",
                    None,
                    "ec2.amazonaws.com",
                )
            }
            Change::UpdateTrust(role) => {
                PlanChange::new(stage, Kind::IamRole, &role.name, Action::Update).field(
                    "trust",
                    None,
                    "ec2.amazonaws.com",
                )
            }
            Change::PutPolicy { role, exists } => PlanChange::new(
                stage,
                Kind::IamRolePolicy,
                &role.name,
                if *exists {
                    Action::Update
                } else {
                    Action::Create
                },
            )
            .field(
                "policy",
                None,
                format!("sha256 {}", &sha256_hex(role.policy.as_bytes())[..12]),
            ),
            Change::Profile { role, create } => PlanChange::new(
                stage,
                Kind::InstanceProfile,
                &role.name,
                if *create {
                    Action::Create
                } else {
                    Action::Update
                },
            )
            .field("role", None, &role.name),
        };
        vec![change]
    }
}

pub async fn find(cloud: &Cloud, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let iam = &cloud.iam;
    let mut actual = Actual::default();
    for role in &model.roles {
        let resource = format!("IamRole {}", role.name);
        let found = find_optional(&resource, "GetRole", &["NoSuchEntity"], || {
            iam.get_role().role_name(&role.name).send()
        })
        .await?
        .and_then(|o| o.role().cloned());
        let policy = find_optional(&resource, "GetRolePolicy", &["NoSuchEntity"], || {
            iam.get_role_policy()
                .role_name(&role.name)
                .policy_name(POLICY_NAME)
                .send()
        })
        .await?;
        let profile = find_optional(
            &format!("InstanceProfile {}", role.name),
            "GetInstanceProfile",
            &["NoSuchEntity"],
            || {
                iam.get_instance_profile()
                    .instance_profile_name(&role.name)
                    .send()
            },
        )
        .await?
        .and_then(|o| o.instance_profile().cloned());
        actual.roles.insert(
            role.name.clone(),
            RoleActual {
                exists: found.is_some(),
                trust_policy: found
                    .as_ref()
                    .and_then(|r| r.assume_role_policy_document())
                    .map(percent_decode),
                policy: policy.map(|p| percent_decode(p.policy_document())),
                profile: profile.map(|p| Profile {
                    arn: p.arn().to_string(),
                    roles: p
                        .roles()
                        .iter()
                        .map(|r| r.role_name().to_string())
                        .collect(),
                }),
            },
        );
    }
    Ok(actual)
}

/// The instance profiles' ARNs, by role.
pub fn learn(model: &ClusterModel, actual: &Actual, known: &mut Known) {
    for role in &model.roles {
        let profile = actual
            .roles
            .get(&role.name)
            .and_then(|r| r.profile.as_ref());
        if let Some(profile) = profile {
            known.profile_arns.insert(role.role, profile.arn.clone());
        }
    }
}

pub fn diff(model: &ClusterModel, actual: &Actual) -> Vec<Change> {
    let mut changes = Vec::new();
    let nothing = RoleActual::default();
    for role in &model.roles {
        let found = actual.roles.get(&role.name).unwrap_or(&nothing);
        if !found.exists {
            changes.push(Change::CreateRole(role.clone()));
        } else if found.trust_policy.as_deref().map(parse_policy)
            != Some(parse_policy(&role.assume_role_policy))
        {
            changes.push(Change::UpdateTrust(role.clone()));
        }
        let policy = found.policy.as_deref().map(parse_policy);
        if policy.as_ref() != Some(&parse_policy(&role.policy)) {
            changes.push(Change::PutPolicy {
                role: role.clone(),
                exists: policy.is_some(),
            });
        }
        let has_role = found
            .profile
            .as_ref()
            .is_some_and(|p| p.roles.contains(&role.name));
        if !has_role {
            changes.push(Change::Profile {
                role: role.clone(),
                create: found.profile.is_none(),
            });
        }
    }
    changes
}

pub async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    let iam = &target.cloud.iam;
    for change in changes {
        match change {
            Change::CreateRole(role) => {
                let tags: Vec<aws_sdk_iam::types::Tag> = target
                    .model
                    .tags
                    .iter()
                    .filter_map(|(k, v)| {
                        aws_sdk_iam::types::Tag::builder()
                            .key(k)
                            .value(v)
                            .build()
                            .ok()
                    })
                    .collect();
                call(&format!("IamRole {}", role.name), "CreateRole", || {
                    iam.create_role()
                        .role_name(&role.name)
                        .assume_role_policy_document(&role.assume_role_policy)
                        .set_permissions_boundary(role.permissions_boundary.clone())
                        .set_tags(Some(tags.clone()))
                        .send()
                })
                .await?;
            }
            Change::UpdateTrust(role) => {
                call(
                    &format!("IamRole {}", role.name),
                    "UpdateAssumeRolePolicy",
                    || {
                        iam.update_assume_role_policy()
                            .role_name(&role.name)
                            .policy_document(&role.assume_role_policy)
                            .send()
                    },
                )
                .await?;
            }
            Change::PutPolicy { role, .. } => {
                call(&format!("IamRole {}", role.name), "PutRolePolicy", || {
                    iam.put_role_policy()
                        .role_name(&role.name)
                        .policy_name(POLICY_NAME)
                        .policy_document(&role.policy)
                        .send()
                })
                .await?;
            }
            Change::Profile { role, create } => {
                let resource = format!("InstanceProfile {}", role.name);
                if *create {
                    let created = call(&resource, "CreateInstanceProfile", || {
                        iam.create_instance_profile()
                            .instance_profile_name(&role.name)
                            .send()
                    })
                    .await?;
                    if let Some(profile) = created.instance_profile() {
                        known
                            .profile_arns
                            .insert(role.role, profile.arn().to_string());
                    }
                }
                call(&resource, "AddRoleToInstanceProfile", || {
                    iam.add_role_to_instance_profile()
                        .instance_profile_name(&role.name)
                        .role_name(&role.name)
                        .send()
                })
                .await?;
            }
        }
    }
    Ok(())
}

/// Policy documents compare as JSON values, whatever their formatting.
fn parse_policy(document: &str) -> serde_json::Value {
    serde_json::from_str(document).unwrap_or(serde_json::Value::String(document.to_string()))
}

/// IAM returns policy documents URL-encoded (RFC 3986). A `%` not followed by two hex digits is kept as it is,
/// and bytes that decode to no UTF-8 become U+FFFD: such a document then differs from the one wanted and is
/// rewritten, which is the right outcome for a document IAM should never hold.
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Deletes an instance profile (`delete cluster`): its roles removed from it first.
pub async fn delete_instance_profile(
    cloud: &Cloud,
    profile: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    let label = profile.label();
    for role in &profile.parts {
        attempt(&label, "RemoveRoleFromInstanceProfile", || {
            cloud
                .iam
                .remove_role_from_instance_profile()
                .instance_profile_name(&profile.id)
                .role_name(role)
                .send()
        })
        .await?;
    }
    attempt(&label, "DeleteInstanceProfile", || {
        cloud
            .iam
            .delete_instance_profile()
            .instance_profile_name(&profile.id)
            .send()
    })
    .await
}

/// Deletes a role (`delete cluster`): its inline policies deleted and attached ones detached first (its
/// `parts`: policy names, and ARNs of attached policies), then the role. Instance profiles holding it are gone
/// by then (profiles go first); one of another name still holding it makes this "not yet" (DeleteConflict).
pub async fn delete_role(
    cloud: &Cloud,
    role: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    let label = role.label();
    for part in &role.parts {
        if part.starts_with("arn:") {
            attempt(&label, "DetachRolePolicy", || {
                cloud
                    .iam
                    .detach_role_policy()
                    .role_name(&role.id)
                    .policy_arn(part)
                    .send()
            })
            .await?;
        } else {
            attempt(&label, "DeleteRolePolicy", || {
                cloud
                    .iam
                    .delete_role_policy()
                    .role_name(&role.id)
                    .policy_name(part)
                    .send()
            })
            .await?;
        }
    }
    attempt(&label, "DeleteRole", || {
        cloud.iam.delete_role().role_name(&role.id).send()
    })
    .await
}

/// Removes tag `key` from a role the cluster keeps.
pub async fn remove_role_tag(
    cloud: &Cloud,
    role: &str,
    key: &str,
    label: &str,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(label, "UntagRole", || {
        cloud.iam.untag_role().role_name(role).tag_keys(key).send()
    })
    .await
}

/// Instance profiles (their roles removed first) and roles (their policies first): any role of the cluster, the
/// service accounts' too.
impl super::task::Delete for IamTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[
            super::deletion::ResourceKind::InstanceProfile,
            super::deletion::ResourceKind::IamRole,
        ])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move {
            match resource.kind {
                super::deletion::ResourceKind::InstanceProfile => {
                    delete_instance_profile(deleting.cloud, resource).await
                }
                super::deletion::ResourceKind::IamRole => {
                    delete_role(deleting.cloud, resource).await
                }
                _ => Err(super::task::not_deleted_here(resource)),
            }
        })
    }

    /// A kept role loses its tag through IAM; anything else through EC2.
    fn untag<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        kind: super::deletion::ResourceKind,
        resource: &'a super::deletion::Resource,
        key: &'a str,
    ) -> super::task::DeleteFuture<'a> {
        match kind {
            super::deletion::ResourceKind::IamRole => Box::pin(async move {
                // A shared tag's label names the kept role (`IamRole nodes.c`).
                let label = resource.label();
                remove_role_tag(deleting.cloud, &resource.id, key, &label).await
            }),
            _ => Box::pin(super::task::untag_ec2(deleting, resource, key)),
        }
    }
}

/// IAM roles, their inline policies and instance profiles, as a [`Task`].
pub struct IamTask;

impl Task for IamTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.iam
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.iam = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder.cloud, wanted.model).await
    }

    fn learn(
        &self,
        wanted: Wanted<'_>,
        actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        learn(wanted.model, actual, known);
        Ok(())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        _known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        Ok(diff(wanted.model, actual))
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes, known).await
    }

    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[Change],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            match change {
                Change::CreateRole(role) => {
                    let tf = tf_name(&role.name);
                    let mut body = TfResource::new()
                        .attr("assume_role_policy", role.assume_role_policy.as_str())
                        .attr("name", role.name.as_str());
                    if let Some(boundary) = &role.permissions_boundary {
                        body = body.attr("permissions_boundary", boundary.as_str());
                    }
                    body = body.attr("tags", string_map(&wanted.model.tags));
                    terraform.resource("aws_iam_role", &tf, body)?;
                    // kops's names: masters_role_*, nodes_role_*.
                    let prefix = match role.role {
                        ballast_state::spec::Role::ControlPlane => "masters",
                        ballast_state::spec::Role::Node => "nodes",
                        ballast_state::spec::Role::Bastion => "bastions",
                        ballast_state::spec::Role::ApiServer => "apiservers",
                    };
                    terraform.output(
                        &format!("{prefix}_role_arn"),
                        value(&reference("aws_iam_role", &tf, "arn")),
                    );
                    terraform.output(
                        &format!("{prefix}_role_name"),
                        value(&reference("aws_iam_role", &tf, "name")),
                    );
                }
                Change::UpdateTrust(role) => {
                    return Err(RenderError::NotACreate {
                        resource: format!("IamRole {}", role.name),
                        action: "a trust policy's update",
                    })
                }
                Change::PutPolicy { role, .. } => {
                    let tf = tf_name(&role.name);
                    terraform.resource(
                        "aws_iam_role_policy",
                        &tf,
                        TfResource::new()
                            .attr("name", POLICY_NAME)
                            .attr("policy", role.policy.as_str())
                            .attr("role", value(&reference("aws_iam_role", &tf, "name"))),
                    )?;
                }
                Change::Profile { role, .. } => {
                    let tf = tf_name(&role.name);
                    terraform.resource(
                        "aws_iam_instance_profile",
                        &tf,
                        TfResource::new()
                            .attr("name", role.name.as_str())
                            .attr("role", value(&reference("aws_iam_role", &tf, "name"))),
                    )?;
                    known
                        .profile_arns
                        .insert(role.role, reference("aws_iam_instance_profile", &tf, "arn"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_compare_whatever_their_encoding() {
        let plain = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}"#;
        let encoded = "%7B%22Version%22%3A%222012-10-17%22%2C%20%22Statement%22%3A%5B%7B%22Effect%22%3A%22Allow%22%2C%22Action%22%3A%22s3%3AGetObject%22%2C%22Resource%22%3A%22%2A%22%7D%5D%7D";
        assert_eq!(parse_policy(&percent_decode(encoded)), parse_policy(plain));
        assert_eq!(parse_policy(&percent_decode(plain)), parse_policy(plain));
    }

    #[test]
    fn stray_percents_and_multi_byte_characters_are_kept() {
        // The hand-written reader sliced `&text[i+1..i+3]` and panicked on a multi-byte character after `%`.
        assert_eq!(percent_decode("%é1"), "%é1");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("caf%C3%A9 %E2%82%AC"), "café €");
        // Bytes that are no UTF-8 are replaced, never a panic.
        assert_eq!(percent_decode("%FF"), "\u{FFFD}");
    }

    proptest::proptest! {
        #[test]
        fn any_policy_text_never_panics_the_reader(text in "\\PC*") {
            let decoded = percent_decode(&text);
            let _ = parse_policy(&decoded);
            // `%XX` (3 bytes) becomes 1 byte, or 3 with its replacement character: never longer.
            proptest::prop_assert!(decoded.len() <= text.len());
            if !text.contains('%') {
                proptest::prop_assert_eq!(decoded, text);
            }
        }

        #[test]
        fn percents_before_any_character_never_panic(
            text in "([%é€😀aF0-9{}\"]|%[0-9a-fA-F]{0,2}){0,40}"
        ) {
            let decoded = percent_decode(&text);
            let _ = parse_policy(&decoded);
            proptest::prop_assert!(decoded.len() <= text.len());
        }

        #[test]
        fn encoding_then_decoding_gives_the_text_back(text in "\\PC*") {
            let encoded =
                percent_encoding::utf8_percent_encode(&text, percent_encoding::NON_ALPHANUMERIC).to_string();
            proptest::prop_assert_eq!(percent_decode(&encoded), text);
        }
    }
}
