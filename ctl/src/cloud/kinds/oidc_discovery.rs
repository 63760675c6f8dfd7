//! The service-account issuer's discovery documents (IRSA, `docs/irsa.md`): `/.well-known/openid-configuration`
//! and `/openid/v1/jwks` in `spec.serviceAccountIssuerDiscovery.discoveryStore`, public-read (object ACLs: those
//! two objects only; the rest of the bucket, and the state store, stay private). Rendered purely by
//! `ballast_state::issuer::discovery` from the service-account keyset's trusted keys, so a rotation's stage changes
//! the JWKS at the next `update cluster`, and a second run finds nothing to change.
//!
//! `learn` puts the issuer in [`Known`]: the node specs (API server flags), the OIDC provider and the service
//! accounts' trust policies follow it.

use std::collections::BTreeMap;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ObjectCannedAcl, Permission, Type};
use ballast_state::digest::sha256_hex;
use ballast_state::irsa::store::{DiscoveryStore, JWKS, OPENID_CONFIGURATION};
use ballast_state::irsa::IrsaSettings;
use ballast_state::irsa::IssuerSettings;
use ballast_state::issuer::discovery::{
    jwks, openid_configuration, published_public_keys, to_json,
};
use ballast_state::layout::ClusterPaths;
use ballast_store::store::StateStore;
use serde::{Deserialize, Serialize};

use super::task::{Finder, Task, Wanted};
use super::{ActualState, Known, Target};
use crate::cloud::aws::{call, find as find_call};
use crate::cloud::error::UpdateError;
use crate::cloud::model::ClusterModel;
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{RenderError, Resource as TfResource, Terraform};

/// The group every ACL grant to "anyone" names.
const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
const FIELD: &str = "spec.serviceAccountIssuerDiscovery.discoveryStore";

/// One published document as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublishedObject {
    pub sha256: String,
    /// Whether its ACL lets anyone read it.
    pub public: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// The custom S3 endpoint of this run (`AWS_ENDPOINT_URL`, the local cloud's), from which the issuer is built
    /// path-style; none on AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// The service-account public keys to publish (PEM), primary first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public_keys: Vec<String>,
    /// The documents found, by S3 key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub objects: BTreeMap<String, PublishedObject>,
}

/// Writes one document, public-read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub bucket: String,
    pub key: String,
    pub body: String,
    pub previous: Option<PublishedObject>,
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let action = if self.previous.is_some() {
            Action::Update
        } else {
            Action::Create
        };
        let mut change = PlanChange::new(
            Stage::SecurityAndIam,
            Kind::OidcDocument,
            format!("s3://{}/{}", self.bucket, self.key),
            action,
        );
        let sha = sha256_hex(self.body.as_bytes());
        let previous_sha = self.previous.as_ref().map(|p| p.sha256.clone());
        if previous_sha.as_deref() != Some(sha.as_str()) {
            change = change.field(
                "sha256",
                previous_sha.map(|s| s[..12.min(s.len())].to_string()),
                &sha[..12],
            );
        }
        if !self.previous.as_ref().is_some_and(|p| p.public) {
            change = change.field(
                "acl",
                self.previous.as_ref().map(|_| "private".to_string()),
                "public-read",
            );
        }
        vec![change]
    }
}

/// The discovery store and issuer of a cluster with discovery on.
pub struct Discovery {
    pub store: DiscoveryStore,
    pub issuer: String,
}

/// The parsed store and the issuer this run publishes (pure); `None` with discovery off.
pub fn discovery(wanted: Wanted<'_>, actual: &Actual) -> Result<Option<Discovery>, UpdateError> {
    let Some(irsa) = IrsaSettings::of(&wanted.completed.cluster.spec) else {
        return Ok(None);
    };
    let store = DiscoveryStore::parse(&irsa.discovery.discovery_store).map_err(|e| {
        UpdateError::Refused {
            resource: format!("Cluster/{}", wanted.model.cluster),
            field: FIELD,
            message: e.to_string(),
        }
    })?;
    let state = &wanted.model.state;
    if store.overlaps_state_store(&state.bucket, &state.prefix) {
        return Err(UpdateError::Refused {
            resource: format!("Cluster/{}", wanted.model.cluster),
            field: FIELD,
            message: format!(
                "{store} holds or is inside the state store (s3://{}/{}): its two documents are public, and the \
                 state store holds the cluster's private keys; use another bucket, or a prefix of this bucket \
                 beside the state store's (only the two documents there are made public)",
                state.bucket, state.prefix
            ),
        });
    }
    let issuer = store.issuer(&wanted.model.region, actual.s3_endpoint.as_deref());
    Ok(Some(Discovery { store, issuer }))
}

/// The documents wanted (pure): key -> body.
pub fn documents(
    store: &DiscoveryStore,
    issuer: &str,
    public_keys: &[String],
) -> Result<Vec<(String, String)>, UpdateError> {
    let set = jwks(public_keys).map_err(|e| UpdateError::Missing {
        resource: "service-account keyset".to_string(),
        message: format!(
            "{e}: the JWKS cannot be published; `ballast get secrets service-account` lists the keys"
        ),
    })?;
    Ok(vec![
        (
            store.key(OPENID_CONFIGURATION),
            to_json(&openid_configuration(issuer, &set)),
        ),
        (store.key(JWKS), to_json(&set)),
    ])
}

/// The S3 client for the discovery store: the standard configuration in the cluster's region, path-style with
/// a custom endpoint (as the state store's client), and that endpoint.
pub(crate) struct DiscoveryS3 {
    pub client: aws_sdk_s3::Client,
    /// The custom endpoint (`AWS_ENDPOINT_URL`), if any.
    pub endpoint: Option<String>,
    sts: aws_sdk_sts::Client,
    /// The STS endpoint `sts` calls, for errors to name.
    sts_endpoint: String,
}

impl DiscoveryS3 {
    /// The account every request to `bucket` names as its expected owner (`ExpectedBucketOwner`): that of the
    /// credentials in use, so a discovery bucket of that name in another account is refused by S3 with 403,
    /// never written to or read from (`ballast_store::store::caller_account`, as the state store does).
    pub async fn owner(&self, bucket: &str) -> Result<String, UpdateError> {
        Ok(ballast_store::store::caller_account(&self.sts, bucket, &self.sts_endpoint).await?)
    }
}

pub(crate) async fn s3(region: &str) -> DiscoveryS3 {
    let shared = ballast_store::sdk::load(Some(region)).await;
    let endpoint = shared.endpoint_url().map(str::to_string);
    let mut builder = aws_sdk_s3::config::Builder::from(&shared);
    if endpoint.is_some() {
        builder = builder.force_path_style(true);
    }
    DiscoveryS3 {
        client: aws_sdk_s3::Client::from_conf(builder.build()),
        endpoint,
        sts: aws_sdk_sts::Client::new(&shared),
        sts_endpoint: ballast_store::sdk::endpoint_of(&shared, "sts"),
    }
}

/// The groups an ACL grant to "anyone" (and to any AWS account at all) names.
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

/// What the discovery bucket's own ACL grants to anyone (pure): one sentence per grant to `AllUsers` or
/// `AuthenticatedUsers`, saying what it lets them do. Empty when the bucket's ACL grants nothing to them (the two
/// documents' object ACLs are public-read by design and are not the bucket's).
pub fn open_bucket_grants(bucket: &str, grants: &[aws_sdk_s3::types::Grant]) -> Vec<String> {
    let mut found = Vec::new();
    for grant in grants {
        let Some(grantee) = grant.grantee() else {
            continue;
        };
        let who = match grantee.uri() {
            Some(ALL_USERS) if grantee.r#type() == &Type::Group => "anyone",
            Some(AUTHENTICATED_USERS) if grantee.r#type() == &Type::Group => "any AWS account",
            _ => continue,
        };
        let what = match grant.permission() {
            Some(Permission::Write) => {
                "write: they can replace the JWKS with their own key and so assume every role that trusts this \
                 cluster's issuer"
            }
            Some(Permission::FullControl) => {
                "full control: they can replace the JWKS with their own key (and so assume every role that \
                 trusts this cluster's issuer) and change the bucket's ACL"
            }
            Some(Permission::WriteAcp) => {
                "WRITE_ACP: they can rewrite the bucket's ACL, and then its objects"
            }
            Some(Permission::Read) => "read: they can list every object in the bucket",
            Some(Permission::ReadAcp) => "READ_ACP: they can read the bucket's ACL",
            _ => continue,
        };
        found.push(format!("bucket {bucket}'s ACL grants {who} {what}"));
    }
    found
}

/// The discovery bucket's exposure: the ACL's grants to anyone ([`open_bucket_grants`]) and the command that
/// closes them, or `None` with discovery off or nothing open. Read by `update cluster` (a warning) and `validate
/// cluster` (a failed check).
pub async fn discovery_bucket_exposure(
    region: &str,
    spec: &ballast_state::spec::ClusterSpec,
) -> Result<Option<String>, UpdateError> {
    let Some(irsa) = IrsaSettings::of(spec) else {
        return Ok(None);
    };
    let Ok(store) = DiscoveryStore::parse(&irsa.discovery.discovery_store) else {
        // Refused, saying why, by validation and by the update's own discovery step.
        return Ok(None);
    };
    let s3 = s3(region).await;
    let bucket = &store.bucket;
    let owner = s3.owner(bucket).await?;
    let acl = call(&format!("s3://{bucket}"), "GetBucketAcl", || {
        s3.client
            .get_bucket_acl()
            .bucket(bucket)
            .expected_bucket_owner(&owner)
            .send()
    })
    .await?;
    let open = open_bucket_grants(bucket, acl.grants());
    if open.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "discovery bucket {bucket}: {}; fix: aws s3api put-bucket-acl --bucket {bucket} --acl private (the two \
         documents keep their own public-read object ACLs; then check the bucket's objects, the JWKS first, for \
         anything written while it was open)",
        open.join("; ")
    )))
}

/// The service-account public keys the JWKS publishes (PEM, primary first), read from the state store: every
/// key the keyset trusts at its rotation's stage.
pub async fn service_account_public_keys(
    store: &StateStore,
    cluster: &str,
) -> Result<Vec<String>, UpdateError> {
    let keys = ballast_store::keystore::node_keys(store, cluster)
        .await
        .map_err(|source| UpdateError::Keys {
            cluster: cluster.to_string(),
            source: Box::new(source),
        })?;
    let paths = ClusterPaths::new(cluster);
    let mut public_keys = Vec::new();
    for key in published_public_keys(&paths, keys.service_account.as_ref()) {
        let object = store.get(&key).await?.ok_or_else(|| UpdateError::Missing {
            resource: format!("state store object {key}"),
            message: "a trusted service-account public key is missing: restore it from the bucket's versions"
                .to_string(),
        })?;
        public_keys.push(String::from_utf8_lossy(&object.data).into_owned());
    }
    Ok(public_keys)
}

async fn find(finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
    if IrsaSettings::of(&wanted.completed.cluster.spec).is_none() {
        return Ok(Actual::default());
    }
    let model: &ClusterModel = wanted.model;
    let s3 = s3(&model.region).await;
    let client = &s3.client;
    let mut actual = Actual {
        s3_endpoint: s3.endpoint.clone(),
        public_keys: service_account_public_keys(finder.store, &model.cluster).await?,
        ..Default::default()
    };
    let Some(discovery) = discovery(wanted, &actual)? else {
        return Ok(actual);
    };
    let bucket = &discovery.store.bucket;
    let owner = s3.owner(bucket).await?;
    for key in [
        discovery.store.key(OPENID_CONFIGURATION),
        discovery.store.key(JWKS),
    ] {
        let resource = format!("s3://{bucket}/{key}");
        let Some(object) = find_call(&resource, "GetObject", &["NoSuchKey", "NotFound"], || {
            client
                .get_object()
                .bucket(bucket)
                .expected_bucket_owner(&owner)
                .key(&key)
                .send()
        })
        .await?
        else {
            continue;
        };
        let body = object
            .body
            .collect()
            .await
            .map(|data| data.into_bytes())
            .unwrap_or_default();
        let acl = call(&resource, "GetObjectAcl", || {
            client
                .get_object_acl()
                .bucket(bucket)
                .expected_bucket_owner(&owner)
                .key(&key)
                .send()
        })
        .await?;
        let public = acl.grants().iter().any(|grant| {
            grant
                .grantee()
                .is_some_and(|g| g.r#type() == &Type::Group && g.uri() == Some(ALL_USERS))
                && matches!(
                    grant.permission(),
                    Some(Permission::Read | Permission::FullControl)
                )
        });
        actual.objects.insert(
            key,
            PublishedObject {
                sha256: sha256_hex(&body),
                public,
            },
        );
    }
    Ok(actual)
}

fn diff(wanted: Wanted<'_>, actual: &Actual) -> Result<Vec<Change>, UpdateError> {
    let Some(discovery) = discovery(wanted, actual)? else {
        return Ok(Vec::new());
    };
    let documents = documents(&discovery.store, &discovery.issuer, &actual.public_keys)?;
    Ok(documents
        .into_iter()
        .filter_map(|(key, body)| {
            let previous = actual.objects.get(&key).cloned();
            let same = previous
                .as_ref()
                .is_some_and(|p| p.public && p.sha256 == sha256_hex(body.as_bytes()));
            (!same).then(|| Change {
                bucket: discovery.store.bucket.clone(),
                key,
                body,
                previous,
            })
        })
        .collect())
}

async fn apply(target: &Target<'_>, changes: &[Change]) -> Result<(), UpdateError> {
    if changes.is_empty() {
        return Ok(());
    }
    let s3 = s3(&target.model.region).await;
    let mut owners = BTreeMap::new();
    for change in changes {
        let resource = format!("s3://{}/{}", change.bucket, change.key);
        if !owners.contains_key(&change.bucket) {
            owners.insert(change.bucket.clone(), s3.owner(&change.bucket).await?);
        }
        let owner = &owners[&change.bucket];
        call(&resource, "PutObject", || {
            s3.client
                .put_object()
                .bucket(&change.bucket)
                .expected_bucket_owner(owner)
                .key(&change.key)
                .content_type("application/json")
                .acl(ObjectCannedAcl::PublicRead)
                .body(ByteStream::from(change.body.clone().into_bytes()))
                .send()
        })
        .await?;
    }
    Ok(())
}

/// Deletes one discovery document (`delete cluster`; its parts are its bucket and key).
pub async fn delete(
    target: Option<&super::deletion::DiscoveryTarget>,
    document: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    let (Some(target), [bucket, key]) = (target, document.parts.as_slice()) else {
        // Found only through a target: without one there is nothing to call.
        return Ok(());
    };
    super::deletion::attempt(&document.label(), "DeleteObject", || {
        target
            .s3
            .delete_object()
            .bucket(bucket)
            .expected_bucket_owner(&target.owner)
            .key(key)
            .send()
    })
    .await
}

/// The two documents, in the discovery store the spec names (the only place the teardown looks for them).
impl super::task::Delete for OidcDiscoveryTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::DiscoveryDocument])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete(deleting.discovery, resource))
    }
}

/// A document's Terraform name, kops's: `discovery-json` for the OpenID configuration, `keys-json` for the JWKS.
pub fn terraform_name(key: &str) -> &'static str {
    if key.ends_with(JWKS) {
        "keys-json"
    } else {
        "discovery-json"
    }
}

/// Whether a JWKS document lists at least one key.
fn publishes_a_key(body: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["keys"].as_array().map(|keys| !keys.is_empty()))
        .unwrap_or(false)
}

/// The discovery documents as a [`Task`].
pub struct OidcDiscoveryTask;

impl Task for OidcDiscoveryTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.oidc_discovery
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.oidc_discovery = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder, wanted).await
    }

    fn learn(
        &self,
        wanted: Wanted<'_>,
        actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        known.service_account_issuer = discovery(wanted, actual)?
            .map(|d| IssuerSettings::published(&d.issuer, ballast_state::node::CLUSTER_DOMAIN));
        Ok(())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        _known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        diff(wanted, actual)
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes).await
    }

    /// Each document as an `aws_s3_object` named as kops names them (`discovery-json`, `keys-json`): the
    /// plan's bytes as its content (rendered here from the keyset's public keys, which Terraform cannot read),
    /// public-read and `application/json`, as the direct apply puts them.
    fn render_terraform(
        &self,
        _wanted: Wanted<'_>,
        changes: &[Change],
        _known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            let resource = format!("OidcDocument s3://{}/{}", change.bucket, change.key);
            if change.previous.is_some() {
                return Err(RenderError::NotACreate {
                    resource,
                    action: "an update",
                });
            }
            let name = terraform_name(&change.key);
            if name == "keys-json" && !publishes_a_key(&change.body) {
                return Err(RenderError::Missing {
                    resource,
                    why: "no service-account public key was given, so the JWKS would publish none and AWS could \
                          verify no token: `update cluster --target terraform` reads them from the state store"
                        .to_string(),
                });
            }
            terraform.resource(
                "aws_s3_object",
                name,
                TfResource::new()
                    .attr("acl", "public-read")
                    .attr("bucket", change.bucket.as_str())
                    // The exact bytes: a literal (hcl-rs escapes it), never a template Terraform would evaluate.
                    .attr("content", hcl::Expression::String(change.body.clone()))
                    .attr("content_type", "application/json")
                    .attr("key", change.key.as_str()),
            )?;
        }
        Ok(())
    }
}
