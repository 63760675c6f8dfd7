//! IRSA's resources at `delete cluster` (`docs/irsa.md`): the service-account roles (the operator's and the
//! cloud controller manager's and EBS CSI controller's), the IAM OIDC provider and the two discovery documents.
//! Roles and the provider are found by the cluster's ownership tag alone, so one left by an earlier spec is
//! found too; the documents are exactly the two keys under the discovery store of the spec still in the state
//! store (a delete removes the spec only once AWS is empty), and nothing else in that bucket is looked at. What is
//! found here is deleted by its kind's `Delete`: IAM's for the roles, `kinds::oidc_provider`, `kinds::oidc_discovery`.

use ballast_state::irsa::store::{JWKS, OPENID_CONFIGURATION};

use super::inventory::{claim, Claim, Resource, ResourceKind};
use crate::cloud::aws::{call, find, ownership_tag};
use crate::cloud::error::UpdateError;
pub use crate::cloud::kinds::deletion::DiscoveryTarget;
use crate::cloud::kinds::service_account_roles::{
    roles_tagged_for_service_accounts, TaggedRole, SERVICE_ACCOUNT_TAG,
};
use crate::cloud::Cloud;

/// The service-account roles tagged as the cluster's (its ownership tag and Ballast's service-account tag),
/// with their inline policy names and attached policy ARNs as parts (detached and deleted before the role).
pub async fn service_account_roles(
    cloud: &Cloud,
    cluster: &str,
) -> Result<Vec<Resource>, UpdateError> {
    let iam = &cloud.iam;
    let mut found = Vec::new();
    for TaggedRole { name, tags } in roles_tagged_for_service_accounts(iam, cluster).await? {
        let resource = format!("IamRole {name}");
        let Some(account) = tags.get(SERVICE_ACCOUNT_TAG) else {
            continue;
        };
        match claim(&tags, cluster) {
            Claim::None => continue,
            Claim::Untag { others } => {
                found.push(
                    Resource::new(
                        ResourceKind::SharedTag,
                        &name,
                        ResourceKind::IamRole.as_str(),
                    )
                    .with_parts(others),
                );
                continue;
            }
            Claim::Owned => {}
        }
        let mut parts: Vec<String> = call(&resource, "ListRolePolicies", || {
            iam.list_role_policies().role_name(&name).send()
        })
        .await?
        .policy_names()
        .to_vec();
        let attached = call(&resource, "ListAttachedRolePolicies", || {
            iam.list_attached_role_policies().role_name(&name).send()
        })
        .await?;
        parts.extend(
            attached
                .attached_policies()
                .iter()
                .filter_map(|p| p.policy_arn().map(str::to_string)),
        );
        found.push(
            Resource::new(
                ResourceKind::IamRole,
                &name,
                &format!("service account {account}"),
            )
            .with_parts(parts)
            .bound_by(&tags, cluster),
        );
    }
    Ok(found)
}

/// The IAM OIDC providers tagged `owned` by the cluster (a provider of another cluster, or one the operator
/// made, is never touched). An account holds at most 100 providers, so each is asked for its tags.
pub async fn oidc_providers(cloud: &Cloud, cluster: &str) -> Result<Vec<Resource>, UpdateError> {
    let iam = &cloud.iam;
    let key = ownership_tag(cluster);
    let listed = call("IAM OIDC providers", "ListOpenIDConnectProviders", || {
        iam.list_open_id_connect_providers().send()
    })
    .await?;
    let mut found = Vec::new();
    for arn in listed
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn())
    {
        let Some(provider) = find(arn, "GetOpenIDConnectProvider", &["NoSuchEntity"], || {
            iam.get_open_id_connect_provider()
                .open_id_connect_provider_arn(arn)
                .send()
        })
        .await?
        else {
            continue;
        };
        let owned = provider
            .tags()
            .iter()
            .any(|t| t.key() == key && t.value() == "owned");
        if owned {
            let url = provider.url().unwrap_or(arn);
            let tags = provider
                .tags()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect();
            found
                .push(Resource::new(ResourceKind::OidcProvider, arn, url).bound_by(&tags, cluster));
        }
    }
    Ok(found)
}

/// The two discovery documents that exist: `s3://bucket/key` as id, bucket and key as parts.
pub async fn discovery_documents(target: &DiscoveryTarget) -> Result<Vec<Resource>, UpdateError> {
    let bucket = &target.store.bucket;
    let mut found = Vec::new();
    for key in [
        target.store.key(OPENID_CONFIGURATION),
        target.store.key(JWKS),
    ] {
        let id = format!("s3://{bucket}/{key}");
        let head = find(
            &id,
            "HeadObject",
            &["NotFound", "NoSuchKey", "NoSuchBucket"],
            || {
                target
                    .s3
                    .head_object()
                    .bucket(bucket)
                    .expected_bucket_owner(&target.owner)
                    .key(&key)
                    .send()
            },
        )
        .await?;
        if head.is_some() {
            found.push(
                Resource::new(ResourceKind::DiscoveryDocument, &id, &key)
                    .with_parts(vec![bucket.clone(), key]),
            );
        }
    }
    Ok(found)
}
