//! The IAM OIDC provider trusting the cluster's published service-account issuer (IRSA, `docs/irsa.md`): url =
//! the issuer, client ids = `amazonaws.com` and `additionalAudiences`, tagged with the cluster's ownership tag.
//! No thumbprint is given: IAM takes the issuer's top intermediate CA's thumbprint itself when the list is left
//! out (and for S3's certificates trusts its own CA library); the local cloud's issuer is plain HTTP, where a
//! thumbprint means nothing.

use aws_sdk_iam::types::Tag;
use ballast_state::irsa::trust::issuer_host_path;
use ballast_state::irsa::IrsaSettings;
use serde::{Deserialize, Serialize};

use super::task::{Finder, Task, Wanted};
use super::{ActualState, Known, Target};
use crate::cloud::aws::{call, find as find_call, ownership_tag};
use crate::cloud::error::UpdateError;
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, values, RenderError, Resource as TfResource, Terraform,
    AWS_PROVIDER_VERSION_OIDC_WITHOUT_THUMBPRINTS,
};

/// The provider as found: the one whose URL is the issuer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FoundProvider {
    pub arn: String,
    pub client_ids: Vec<String>,
    /// Whether it carries this cluster's ownership tag (one without it is another's: never changed).
    pub owned: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<FoundProvider>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create {
        url: String,
        client_ids: Vec<String>,
    },
    /// The provider's client ids become exactly `client_ids`.
    ClientIds {
        arn: String,
        url: String,
        add: Vec<String>,
        remove: Vec<String>,
    },
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let change = match self {
            Change::Create { url, client_ids } => PlanChange::new(
                Stage::SecurityAndIam,
                Kind::OidcProvider,
                url,
                Action::Create,
            )
            .field("clientIds", None, client_ids.join(",")),
            Change::ClientIds {
                url, add, remove, ..
            } => PlanChange::new(
                Stage::SecurityAndIam,
                Kind::OidcProvider,
                url,
                Action::Update,
            )
            .field(
                "clientIds",
                Some(format!("-[{}]", remove.join(","))),
                format!("+[{}]", add.join(",")),
            ),
        };
        vec![change]
    }
}

/// The provider's URL as IAM stores it: the issuer.
fn wanted_provider(wanted: Wanted<'_>, known: &Known) -> Option<(String, Vec<String>)> {
    let irsa = IrsaSettings::of(&wanted.completed.cluster.spec)?;
    if !irsa.oidc_provider {
        return None;
    }
    let issuer = known.service_account_issuer.as_ref()?;
    Some((issuer.issuer.clone(), irsa.audiences()))
}

async fn find(finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
    let Some((url, _)) = wanted_provider(wanted, finder.known) else {
        return Ok(Actual::default());
    };
    let iam = &finder.cloud.iam;
    let host_path = issuer_host_path(&url).to_string();
    let listed = call("IAM OIDC providers", "ListOpenIDConnectProviders", || {
        iam.list_open_id_connect_providers().send()
    })
    .await?;
    let Some(arn) = listed
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn())
        .find(|arn| arn.ends_with(&format!(":oidc-provider/{host_path}")))
        .map(str::to_string)
    else {
        return Ok(Actual::default());
    };
    let Some(found) = find_call(&arn, "GetOpenIDConnectProvider", &["NoSuchEntity"], || {
        iam.get_open_id_connect_provider()
            .open_id_connect_provider_arn(&arn)
            .send()
    })
    .await?
    else {
        return Ok(Actual::default());
    };
    let key = ownership_tag(&wanted.model.cluster);
    Ok(Actual {
        provider: Some(FoundProvider {
            owned: found
                .tags()
                .iter()
                .any(|t| t.key() == key && t.value() == "owned"),
            client_ids: found.client_id_list().to_vec(),
            arn,
        }),
    })
}

fn diff(wanted: Wanted<'_>, known: &Known, actual: &Actual) -> Result<Vec<Change>, UpdateError> {
    let Some((url, client_ids)) = wanted_provider(wanted, known) else {
        return Ok(Vec::new());
    };
    let Some(found) = &actual.provider else {
        return Ok(vec![Change::Create { url, client_ids }]);
    };
    if !found.owned {
        return Err(UpdateError::Refused {
            resource: format!("OIDC provider {}", found.arn),
            field: "spec.serviceAccountIssuerDiscovery.discoveryStore",
            message: "exists without this cluster's ownership tag: another cluster (or someone) uses this issuer; \
                      choose another discovery store"
                .to_string(),
        });
    }
    let add: Vec<String> = client_ids
        .iter()
        .filter(|c| !found.client_ids.contains(c))
        .cloned()
        .collect();
    let remove: Vec<String> = found
        .client_ids
        .iter()
        .filter(|c| !client_ids.contains(c))
        .cloned()
        .collect();
    if add.is_empty() && remove.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![Change::ClientIds {
        arn: found.arn.clone(),
        url,
        add,
        remove,
    }])
}

async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    let iam = &target.cloud.iam;
    for change in changes {
        match change {
            Change::Create { url, client_ids } => {
                let tags: Vec<Tag> = target
                    .tags_named(&format!("oidc.{}", target.model.cluster))
                    .into_iter()
                    .filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok())
                    .collect();
                let made = call(url, "CreateOpenIDConnectProvider", || {
                    iam.create_open_id_connect_provider()
                        .url(url)
                        .set_client_id_list(Some(client_ids.clone()))
                        .set_tags(Some(tags.clone()))
                        .send()
                })
                .await?;
                known.oidc_provider_arn = made.open_id_connect_provider_arn().map(str::to_string);
            }
            Change::ClientIds {
                arn, add, remove, ..
            } => {
                for id in add {
                    call(arn, "AddClientIDToOpenIDConnectProvider", || {
                        iam.add_client_id_to_open_id_connect_provider()
                            .open_id_connect_provider_arn(arn)
                            .client_id(id)
                            .send()
                    })
                    .await?;
                }
                for id in remove {
                    call(arn, "RemoveClientIDFromOpenIDConnectProvider", || {
                        iam.remove_client_id_from_open_id_connect_provider()
                            .open_id_connect_provider_arn(arn)
                            .client_id(id)
                            .send()
                    })
                    .await?;
                }
            }
        }
    }
    Ok(())
}

/// Deletes an OIDC provider (`delete cluster`), once the roles trusting it are gone.
pub async fn delete(
    cloud: &crate::cloud::Cloud,
    provider: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(&provider.label(), "DeleteOpenIDConnectProvider", || {
        cloud
            .iam
            .delete_open_id_connect_provider()
            .open_id_connect_provider_arn(&provider.id)
            .send()
    })
    .await
}

/// The cluster's OIDC providers (found by its ownership tag, any issuer).
impl super::task::Delete for OidcProviderTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::OidcProvider])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete(deleting.cloud, resource))
    }
}

/// The OIDC provider as a [`Task`].
pub struct OidcProviderTask;

impl Task for OidcProviderTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.oidc_provider
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.oidc_provider = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder, wanted).await
    }

    fn learn(
        &self,
        _wanted: Wanted<'_>,
        actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        known.oidc_provider_arn = actual.provider.as_ref().map(|p| p.arn.clone());
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
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes, known).await
    }

    /// The provider as `aws_iam_openid_connect_provider` named for the cluster (kops's name): url, client ids
    /// and tags as the direct apply makes it, and no `thumbprint_list`, as it gives none (the file then needs
    /// an AWS provider that takes none); its ARN is a reference the roles' trust policies name. kops's outputs
    /// `iam_openid_connect_provider_arn` and `iam_openid_connect_provider_issuer` (the issuer without scheme).
    fn render_terraform(
        &self,
        wanted: Wanted<'_>,
        changes: &[Change],
        known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            let (url, client_ids) = match change {
                Change::Create { url, client_ids } => (url, client_ids),
                Change::ClientIds { url, .. } => {
                    return Err(RenderError::NotACreate {
                        resource: format!("OidcProvider {url}"),
                        action: "a change of its client ids",
                    })
                }
            };
            let cluster = &wanted.model.cluster;
            let tf = tf_name(cluster);
            let tags = super::tags_named(wanted.model, &format!("oidc.{cluster}"));
            terraform.resource(
                "aws_iam_openid_connect_provider",
                &tf,
                TfResource::new()
                    .attr("client_id_list", values(client_ids))
                    .attr("tags", string_map(&tags))
                    .attr("url", url.as_str()),
            )?;
            terraform.require_aws_provider(AWS_PROVIDER_VERSION_OIDC_WITHOUT_THUMBPRINTS);
            let arn = reference("aws_iam_openid_connect_provider", &tf, "arn");
            terraform.output("iam_openid_connect_provider_arn", value(&arn));
            terraform.output(
                "iam_openid_connect_provider_issuer",
                hcl::Expression::String(issuer_host_path(url).to_string()),
            );
            known.oidc_provider_arn = Some(arn);
        }
        Ok(())
    }
}
