//! Node specs in the state store (`nodes/<group>/spec.yaml`), one per group, rendered from the completed spec.
//! They name the load balancer, so they are only rendered once it exists; until then the plan says their hash
//! is known after apply.

use std::collections::BTreeMap;

use ballast_state::digest::sha256_hex;
use ballast_state::irsa::PodIdentityWebhookSettings;
use ballast_state::keyset::NodeKeys;
use ballast_state::layout::{pki_names, ClusterPaths};
use ballast_state::node::{render_node_spec_with_keys, RenderedNodeSpec};
use ballast_state::spec::ClusterConfig;
use ballast_store::store::{Precondition, StateStore, Version};
use serde::{Deserialize, Serialize};

use super::{ActualState, Known, Target};
use crate::cloud::api_servers;
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Home, Task, Wanted};
use crate::cloud::model::ClusterModel;
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage, KNOWN_AFTER_APPLY};
use crate::cloud::terraform::{RenderError, Terraform};

/// A group's node spec object as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredSpec {
    pub sha256: String,
    /// The object's version, for the conditional write that replaces it (not recorded).
    #[serde(skip)]
    pub version: Option<Version>,
    /// The labels and taints its kubelet registers with, read from the stored spec so a plan can show what a
    /// change of them is; `None`: not readable (a spec of another shape), and a plan shows only the new ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<Registration>,
}

/// What a group's kubelet registers its node with (`spec.nodeLabels`, `spec.taints`, completed): not an AWS
/// setting, so a plan shows it on the group's node spec, whose new hash rolls the group's instances.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registration {
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<String>,
}

impl Registration {
    /// A completed group's, as its node spec will carry it (`ballast_state::node`'s `KubeletSettings`).
    fn of_group(completed: &ClusterConfig, group: &str) -> Self {
        completed
            .instance_group(group)
            .map(|ig| Registration {
                node_labels: ig.spec.node_labels.clone(),
                taints: ig.spec.taints.clone().unwrap_or_default(),
            })
            .unwrap_or_default()
    }

    /// A rendered node spec's.
    pub fn of_spec(rendered: &RenderedNodeSpec) -> Self {
        Registration {
            node_labels: rendered.spec.kubelet.node_labels.clone(),
            taints: rendered.spec.kubelet.taints.clone(),
        }
    }

    /// A stored node spec's, read leniently (only `kubelet.nodeLabels` and `kubelet.taints`): `None` when the
    /// object is not YAML of that shape.
    fn of_stored(data: &[u8]) -> Option<Self> {
        #[derive(Deserialize)]
        struct Stored {
            kubelet: StoredKubelet,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct StoredKubelet {
            #[serde(default)]
            node_labels: BTreeMap<String, String>,
            #[serde(default)]
            taints: Vec<String>,
        }
        let stored: Stored = yaml_serde::from_slice(data).ok()?;
        Some(Registration {
            node_labels: stored.kubelet.node_labels,
            taints: stored.kubelet.taints,
        })
    }

    fn labels_text(&self) -> String {
        if self.node_labels.is_empty() {
            return "(none)".to_string();
        }
        self.node_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn taints_text(&self) -> String {
        if self.taints.is_empty() {
            return "(none)".to_string();
        }
        self.taints.join(", ")
    }

    /// Plan lines: every label and taint of a new spec (`previous` None), or those that changed.
    fn fields(
        &self,
        previous: Option<&Registration>,
    ) -> Vec<(&'static str, Option<String>, String)> {
        let mut fields = Vec::new();
        match previous {
            None => {
                if !self.node_labels.is_empty() {
                    fields.push(("nodeLabels", None, self.labels_text()));
                }
                if !self.taints.is_empty() {
                    fields.push(("taints", None, self.taints_text()));
                }
            }
            Some(previous) => {
                if previous.node_labels != self.node_labels {
                    fields.push((
                        "nodeLabels",
                        Some(previous.labels_text()),
                        self.labels_text(),
                    ));
                }
                if previous.taints != self.taints {
                    fields.push(("taints", Some(previous.taints_text()), self.taints_text()));
                }
            }
        }
        fields
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// By group; a group left out has none.
    #[serde(default)]
    pub specs: BTreeMap<String, StoredSpec>,
    /// The keys the nodes must use, from the cluster's rotated keysets (docs/keys.md); not recorded: a recorded
    /// plan is of a cluster whose keys were never rotated.
    #[serde(skip)]
    pub keys: NodeKeys,
    /// With an API-server group: whether the etcd client pair issued for API servers
    /// (`pki/etcd-client-api-server/`) is there and can stay (`api_servers::etcd_client_pair_fits`). `None`:
    /// not looked at (no API-server group, or a recorded state). Not recorded.
    #[serde(skip)]
    pub api_server_etcd_client_fits: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The load balancer does not exist yet, so neither does the spec's content (but its kubelet's
    /// registration is known).
    CreateLater {
        group: String,
        registration: Registration,
    },
    /// Writes the rendered spec over `previous` (`None`: there is none).
    Put {
        group: String,
        rendered: Box<RenderedNodeSpec>,
        previous: Option<StoredSpec>,
    },
    /// Issues the API-server nodes' etcd client pair with the etcd CA that issues (it is absent, torn, of
    /// another CA, or expiring): API-server nodes hold no etcd CA key, so this is where theirs comes from.
    IssueApiServerEtcdClient,
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let stage = Stage::NodeSpecs;
        let change = match self {
            Change::CreateLater {
                group,
                registration,
            } => with_fields(
                PlanChange::new(stage, Kind::NodeSpec, group, Action::Create).field(
                    "sha256",
                    None,
                    KNOWN_AFTER_APPLY,
                ),
                registration.fields(None),
            ),
            Change::Put {
                group,
                rendered,
                previous,
            } => {
                let change = PlanChange::new(
                    stage,
                    Kind::NodeSpec,
                    group,
                    if previous.is_some() {
                        Action::Update
                    } else {
                        Action::Create
                    },
                )
                .field(
                    "sha256",
                    previous
                        .as_ref()
                        .map(|p| p.sha256[..12.min(p.sha256.len())].to_string()),
                    &rendered.sha256[..12],
                );
                // A spec found but not readable shows no registration lines rather than a false "all new".
                let registration = Registration::of_spec(rendered);
                let fields = match previous {
                    None => registration.fields(None),
                    Some(StoredSpec {
                        registration: Some(before),
                        ..
                    }) => registration.fields(Some(before)),
                    Some(_) => Vec::new(),
                };
                with_fields(change, fields)
            }
            Change::IssueApiServerEtcdClient => PlanChange::new(
                stage,
                Kind::NodeSpec,
                format!("pki/{}", pki_names::API_SERVER_ETCD_CLIENT),
                Action::Create,
            )
            .field("issuer", None, "etcd CA"),
        };
        vec![change]
    }
}

fn with_fields(
    change: PlanChange,
    fields: Vec<(&'static str, Option<String>, String)>,
) -> PlanChange {
    fields
        .into_iter()
        .fold(change, |change, (field, from, to)| {
            change.field(field, from, to)
        })
}

/// Reads each group's node spec.
pub async fn find(store: &StateStore, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let paths = ClusterPaths::new(&model.cluster);
    let mut actual = Actual {
        keys: ballast_store::keystore::node_keys(store, &model.cluster)
            .await
            .map_err(|source| UpdateError::Keys {
                cluster: model.cluster.clone(),
                source: Box::new(source),
            })?,
        ..Default::default()
    };
    for group in &model.groups {
        if let Some(object) = store.get(&paths.node_spec(&group.name)).await? {
            actual.specs.insert(
                group.name.clone(),
                StoredSpec {
                    sha256: sha256_hex(&object.data),
                    registration: Registration::of_stored(&object.data),
                    version: Some(object.version),
                },
            );
        }
    }
    Ok(actual)
}

/// Where the etcd CA that issues is: the rotated keyset's primary, else the one `create cluster` made.
fn etcd_ca_locations(paths: &ClusterPaths, keys: &NodeKeys) -> (String, String) {
    let at = keys.locations(paths);
    (
        at.etcd_ca_cert
            .unwrap_or_else(|| paths.pki_cert(pki_names::ETCD_CA)),
        at.etcd_ca_key
            .unwrap_or_else(|| paths.pki_key(pki_names::ETCD_CA)),
    )
}

/// With an API-server group, reads the etcd client pair issued for API servers and whether it can stay, into
/// `actual` (after [`find`], whose keys say which etcd CA issues).
pub async fn check_api_server_etcd_client(
    store: &StateStore,
    completed: &ClusterConfig,
    model: &ClusterModel,
    actual: &mut Actual,
) -> Result<(), UpdateError> {
    if !api_servers::has_api_servers(completed) {
        actual.api_server_etcd_client_fits = None;
        return Ok(());
    }
    let paths = ClusterPaths::new(&model.cluster);
    let name = pki_names::API_SERVER_ETCD_CLIENT;
    let (ca_cert, _) = etcd_ca_locations(&paths, &actual.keys);
    let cert = store.get(&paths.pki_cert(name)).await?;
    let key = store.get(&paths.pki_key(name)).await?;
    let ca = store.get(&ca_cert).await?;
    let fits = match (cert, key, ca) {
        (Some(cert), Some(key), Some(ca)) => api_servers::etcd_client_pair_fits(
            &cert.data,
            &key.data,
            &ca.data,
            time::OffsetDateTime::now_utc(),
        ),
        _ => false,
    };
    actual.api_server_etcd_client_fits = Some(fits);
    Ok(())
}

/// Issues the etcd client pair for API servers with the etcd CA that issues, and writes it (the key first: a
/// certificate is never there without its key; a torn pair does not fit and is issued again).
async fn issue_api_server_etcd_client(target: &Target<'_>) -> Result<(), UpdateError> {
    let paths = ClusterPaths::new(&target.model.cluster);
    let keys = ballast_store::keystore::node_keys(target.store, &target.model.cluster)
        .await
        .map_err(|source| UpdateError::Keys {
            cluster: target.model.cluster.clone(),
            source: Box::new(source),
        })?;
    let (ca_cert, ca_key) = etcd_ca_locations(&paths, &keys);
    let read = |key: String| async move {
        let object = target.store.get(&key).await?;
        let data = object.map(|o| o.data).ok_or_else(|| UpdateError::Missing {
            resource: key.clone(),
            message: "the etcd CA is not in the state store: the API servers' etcd client pair cannot be issued"
                .into(),
        })?;
        String::from_utf8(data).map_err(|_| UpdateError::Missing {
            resource: key.clone(),
            message: "not UTF-8 PEM".into(),
        })
    };
    let (cert_pem, key_pem) = (read(ca_cert).await?, read(ca_key).await?);
    let name = pki_names::API_SERVER_ETCD_CLIENT;
    let (cert, key) =
        api_servers::issue_etcd_client_pair(&cert_pem, &key_pem, time::OffsetDateTime::now_utc())
            .map_err(|e| UpdateError::Refused {
            resource: format!("pki/{name}"),
            field: "etcd CA",
            message: e.to_string(),
        })?;
    // Only `update cluster` writes these, under the writers' lock.
    target
        .store
        .put(&paths.pki_key(name), key.as_bytes(), &Precondition::None)
        .await?;
    target
        .store
        .put(&paths.pki_cert(name), cert.as_bytes(), &Precondition::None)
        .await?;
    Ok(())
}

/// Every group's node spec, rendered for the load balancer at `api_dns` (pure).
pub fn render(
    completed: &ClusterConfig,
    model: &ClusterModel,
    api_dns: &str,
    keys: &NodeKeys,
) -> Result<Vec<RenderedNodeSpec>, UpdateError> {
    let state_url = model.state.url();
    model
        .groups
        .iter()
        .map(|group| {
            render_node_spec_with_keys(completed, &group.name, &state_url, api_dns, keys).map_err(
                |source| UpdateError::NodeSpec {
                    group: group.name.clone(),
                    source,
                },
            )
        })
        .collect()
}

/// The specs to write; `rendered` is `None` while the load balancer does not exist.
pub fn diff(
    model: &ClusterModel,
    rendered: Option<&[RenderedNodeSpec]>,
    actual: &Actual,
) -> Vec<Change> {
    let pair = (actual.api_server_etcd_client_fits == Some(false))
        .then_some(Change::IssueApiServerEtcdClient);
    let Some(rendered) = rendered else {
        return model
            .groups
            .iter()
            .map(|g| Change::CreateLater {
                group: g.name.clone(),
                registration: Registration::default(),
            })
            .chain(pair)
            .collect();
    };
    pair.into_iter()
        .chain(
            model
                .groups
                .iter()
                .zip(rendered)
                .filter_map(|(group, rendered)| {
                    let previous = actual.specs.get(&group.name);
                    (previous.map(|p| p.sha256.as_str()) != Some(rendered.sha256.as_str())).then(
                        || Change::Put {
                            group: group.name.clone(),
                            rendered: Box::new(rendered.clone()),
                            previous: previous.cloned(),
                        },
                    )
                }),
        )
        .collect()
}

/// `changes` with each spec to create later showing its group's kubelet registration, known from the spec.
fn with_registrations(completed: &ClusterConfig, changes: Vec<Change>) -> Vec<Change> {
    changes
        .into_iter()
        .map(|change| match change {
            Change::CreateLater { group, .. } => Change::CreateLater {
                registration: Registration::of_group(completed, &group),
                group,
            },
            other => other,
        })
        .collect()
}

/// The hashes launch templates carry.
pub fn learn(model: &ClusterModel, rendered: &[RenderedNodeSpec], known: &mut Known) {
    for (group, rendered) in model.groups.iter().zip(rendered) {
        known
            .node_spec_hashes
            .insert(group.name.clone(), rendered.sha256.clone());
    }
}

pub async fn apply(target: &Target<'_>, changes: &[Change]) -> Result<(), UpdateError> {
    let paths = ClusterPaths::new(&target.model.cluster);
    // The pair first: an API-server node booting from its new spec finds it.
    if changes
        .iter()
        .any(|c| matches!(c, Change::IssueApiServerEtcdClient))
    {
        issue_api_server_etcd_client(target).await?;
    }
    for change in changes {
        let Change::Put {
            group,
            rendered,
            previous,
        } = change
        else {
            continue;
        };
        let precondition = match previous.as_ref().and_then(|p| p.version.clone()) {
            Some(version) => Precondition::MustMatch(version),
            None => Precondition::MustNotExist,
        };
        target
            .store
            .put(
                &paths.node_spec(group),
                rendered.yaml.as_bytes(),
                &precondition,
            )
            .await?;
    }
    Ok(())
}

/// Nothing in AWS: the node specs go with the cluster's state, which `delete cluster` removes once AWS is empty.
impl super::task::Delete for NodeSpecsTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::StateStore
    }

    fn delete<'a>(
        &'a self,
        _deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(async move { Err(super::task::not_deleted_here(resource)) })
    }
}

/// The node specs, as a [`Task`] whose home is the state store: written by Ballast whatever the target. Read
/// and rendered only once the load balancer they name exists.
pub struct NodeSpecsTask;

impl NodeSpecsTask {
    fn rendered(
        wanted: Wanted<'_>,
        known: &Known,
        actual: &Actual,
    ) -> Result<Option<Vec<RenderedNodeSpec>>, UpdateError> {
        // The webhook's role ARNs in the account of the cluster's instance profiles, as the add-ons' roles are.
        let webhook = known.account_arn().and_then(|profile| {
            PodIdentityWebhookSettings::of(
                &wanted.completed.cluster.spec,
                &wanted.model.cluster,
                &wanted.model.region,
                profile,
            )
        });
        known
            .load_balancer_dns
            .as_deref()
            .map(|dns| render(wanted.completed, wanted.model, dns, &actual.keys))
            .transpose()?
            .map(|specs| {
                specs
                    .into_iter()
                    .map(|spec| {
                        let group = spec.spec.instance_group.clone();
                        ballast_state::issuer::with_irsa(
                            spec,
                            known.service_account_issuer.as_ref(),
                            known.addon_roles.as_ref(),
                            webhook.as_ref(),
                        )
                        .map_err(|source| UpdateError::NodeSpec { group, source })
                    })
                    .collect()
            })
            .transpose()
    }
}

impl Task for NodeSpecsTask {
    type Actual = Actual;
    type Change = Change;

    fn home(&self) -> Home {
        Home::StateStore
    }

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.node_specs
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.node_specs = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        // A new cluster's plan: the specs name the load balancer, which does not exist yet.
        if finder.known.load_balancer_dns.is_none() {
            return Ok(Actual::default());
        }
        let mut actual = find(finder.store, wanted.model).await?;
        check_api_server_etcd_client(finder.store, wanted.completed, wanted.model, &mut actual)
            .await?;
        Ok(actual)
    }

    fn learn(
        &self,
        wanted: Wanted<'_>,
        actual: &Actual,
        known: &mut Known,
    ) -> Result<(), UpdateError> {
        if let Some(rendered) = Self::rendered(wanted, known, actual)? {
            learn(wanted.model, &rendered, known);
        }
        Ok(())
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        Ok(match Self::rendered(wanted, known, actual)? {
            Some(rendered) => diff(wanted.model, Some(&rendered), actual),
            None => with_registrations(
                wanted.completed,
                diff(wanted.model, None, &Actual::default()),
            ),
        })
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes).await
    }

    /// Node specs are state-store objects, not AWS resources: nothing of theirs is Terraform's. The specs
    /// rendered are handed over, so `--target terraform --yes` writes the very specs whose hashes the launch
    /// templates carry (with IRSA's issuer and roles, which only this run knows).
    fn render_terraform(
        &self,
        _wanted: Wanted<'_>,
        changes: &[Change],
        _known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        terraform.keep_node_specs(
            changes
                .iter()
                .filter_map(|c| match c {
                    Change::Put { rendered, .. } => Some(rendered.as_ref().clone()),
                    _ => None,
                })
                .collect(),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use ballast_state::defaults::complete;
    use ballast_state::document::{config_from_objects, parse_objects};
    use ballast_state::spec::Role;

    use super::*;
    use crate::cloud::model::{cluster_model, StateLocation};

    const SPEC: &str = "
apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata: {name: demo.example.com}
spec:
  subnets: [{name: a, zone: us-west-2a}]
  serviceAccountIssuerDiscovery: {discoveryStore: s3://demo-oidc/demo.example.com, enableAWSOIDCProvider: true}
  iam:
    serviceAccountExternalPermissions:
    - {name: reports, namespace: team-a, aws: {policyARNs: [arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess]}}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {name: control-plane}
spec: {role: ControlPlane}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {name: nodes}
spec: {role: Node}
";

    /// With the OIDC provider on, the control-plane node spec carries the webhook's settings with each service
    /// account's role ARN in the instance profiles' account; the workers' spec carries none.
    #[test]
    fn the_control_plane_spec_carries_the_webhook_settings() {
        let objects = parse_objects("spec", SPEC).expect("parses");
        let completed = complete(&config_from_objects("spec", objects).expect("a cluster"));
        let state = StateLocation::from_url("s3://state/clusters").expect("s3");
        let model = cluster_model(&completed, &state);
        let wanted = Wanted {
            model: &model,
            completed: &completed,
        };
        let mut known = Known {
            load_balancer_dns: Some("api.example.elb.amazonaws.com".into()),
            ..Known::default()
        };
        known.profile_arns.insert(
            Role::ControlPlane,
            "arn:aws:iam::123456789012:instance-profile/control-plane.demo.example.com".into(),
        );
        let specs = NodeSpecsTask::rendered(wanted, &known, &Actual::default())
            .expect("renders")
            .expect("the load balancer is known");
        let control_plane = specs
            .iter()
            .find(|s| s.spec.instance_group == "control-plane")
            .expect("the control-plane spec");
        let webhook = control_plane
            .spec
            .control_plane
            .as_ref()
            .and_then(|cp| cp.pod_identity_webhook.as_ref())
            .expect("the webhook's settings");
        assert_eq!(webhook.region, "us-west-2");
        assert_eq!(webhook.audience, "amazonaws.com");
        assert_eq!(
            webhook
                .service_accounts
                .iter()
                .map(|a| (a.namespace.as_str(), a.name.as_str(), a.role_arn.as_str()))
                .collect::<Vec<_>>(),
            [(
                "team-a",
                "reports",
                "arn:aws:iam::123456789012:role/reports.team-a.sa.demo.example.com"
            )]
        );
        assert!(control_plane.yaml.contains("podIdentityWebhook:"));
        let nodes = specs
            .iter()
            .find(|s| s.spec.instance_group == "nodes")
            .expect("the workers' spec");
        assert!(nodes.spec.control_plane.is_none());
        assert!(!nodes.yaml.contains("podIdentityWebhook"));
    }
}
