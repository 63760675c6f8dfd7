//! One module per kind of AWS resource (and the node specs in the state store), in the shape of kops's tasks:
//!
//! - `find`: read-only I/O, returns the kind's `Actual` (plain data: serializable, so a recorded actual state
//!   can be planned against without AWS, which the plan golden tests do);
//! - `diff(wanted, actual)`: pure, returns the kind's typed changes, or refuses a change AWS cannot make in
//!   place ([`UpdateError::Immutable`](super::error::UpdateError::Immutable), naming the resource and spec field);
//! - `apply`: I/O, performs those changes and records the ids it made in [`Known`].
//!
//! - `delete` (`delete cluster`): I/O, deletes one resource the teardown (`super::teardown`) found, answering
//!   done, not yet (retried next round) or failed ([`deletion`]: the resource, the call and its answer, which
//!   the teardown uses too; no kind imports the teardown).
//!
//! Each module's task (`network::VpcTask`, ...) implements [`Task`](task::Task) with these verbs and
//! `render_terraform` (`update cluster --target terraform`). The engine (`super::engine`) runs the tasks in
//! [`Stage`](super::plan::Stage) order.

pub mod auto_scaling_groups;
pub mod deletion;
pub mod iam;
pub mod launch_templates;
pub mod leftovers;
pub mod load_balancer;
pub mod network;
pub mod node_specs;
pub mod oidc_discovery;
pub mod oidc_provider;
pub mod routes;
pub mod security_groups;
pub mod service_account_roles;
pub mod subnets;
pub mod task;
pub mod termination;
pub mod volumes;

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;
use ballast_state::spec::Role;
use ballast_store::store::StateStore;
use serde::{Deserialize, Serialize};

use super::aws::{call, ownership_tag};
use super::error::UpdateError;
use super::model::ClusterModel;
use super::plan::{Action, Change, Kind, Planned, Stage};
use super::terraform::{tf_name, RenderError, Resource as TfResource, Terraform};
use super::Cloud;

/// Values that exist only once resources do: found, or made by this run. Later kinds' wanted state uses them.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub vpc_id: Option<String>,
    pub subnet_ids: BTreeMap<String, String>,
    pub internet_gateway_id: Option<String>,
    /// By zone.
    pub nat_gateway_ids: BTreeMap<String, String>,
    pub security_group_ids: BTreeMap<Role, String>,
    pub profile_arns: BTreeMap<Role, String>,
    pub load_balancer_arn: Option<String>,
    pub load_balancer_dns: Option<String>,
    pub target_group_arn: Option<String>,
    pub node_spec_hashes: BTreeMap<String, String>,
    pub launch_template_ids: BTreeMap<String, String>,
    /// The published service-account issuer (IRSA, `oidc_discovery`): node specs carry it.
    pub service_account_issuer: Option<ballast_state::irsa::IssuerSettings>,
    /// The IAM OIDC provider's ARN, once it exists (`oidc_provider`).
    pub oidc_provider_arn: Option<String>,
    /// The roles of Ballast's add-ons on IRSA (`service_account_roles`): node specs carry them.
    pub addon_roles: Option<ballast_state::irsa::AddonRoles>,
    /// The termination queue's ARN and URL, once it exists (`termination`): its rules target it.
    pub termination_queue_arn: Option<String>,
    pub termination_queue_url: Option<String>,
    /// An instance profile's ARN given by the caller of `--target terraform`, whose `profile_arns` are Terraform
    /// references naming no account: see [`Known::account_arn`].
    pub given_profile_arn: Option<String>,
}

impl Known {
    /// An ARN in the cluster's account and partition (an instance profile's): the roles' ARNs the node specs
    /// carry (the add-ons', the service accounts') are built in it before those roles exist. A found or made
    /// profile's; with `--target terraform`, where those are references, the one the caller gave.
    pub fn account_arn(&self) -> Option<&str> {
        self.profile_arns
            .values()
            .map(String::as_str)
            .find(|arn| arn.starts_with("arn:"))
            .or(self.given_profile_arn.as_deref())
    }
}

/// What the kinds' `apply` works on: the AWS clients, the state store and the model (for names and tags).
pub struct Target<'a> {
    pub cloud: &'a Cloud,
    pub store: &'a StateStore,
    pub model: &'a ClusterModel,
}

impl Target<'_> {
    /// The cluster's tags and `Name`.
    pub fn tags_named(&self, name: &str) -> BTreeMap<String, String> {
        tags_named(self.model, name)
    }
}

/// Everything `find` found, kind by kind: what a plan is made against. Serialized, it is a recorded actual
/// state (`ctl/tests/data/<case>/actual.yaml`); a kind left out is one with nothing found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActualState {
    #[serde(default)]
    pub network: network::Actual,
    #[serde(default)]
    pub subnets: subnets::Actual,
    #[serde(default)]
    pub routes: routes::Actual,
    #[serde(default)]
    pub etcd_volumes: volumes::Actual,
    #[serde(default)]
    pub security_groups: security_groups::Actual,
    #[serde(default)]
    pub iam: iam::Actual,
    #[serde(default)]
    pub oidc_discovery: oidc_discovery::Actual,
    #[serde(default)]
    pub oidc_provider: oidc_provider::Actual,
    #[serde(default)]
    pub service_account_roles: service_account_roles::Actual,
    #[serde(default)]
    pub load_balancer: load_balancer::Actual,
    #[serde(default)]
    pub node_specs: node_specs::Actual,
    #[serde(default)]
    pub launch_templates: launch_templates::Actual,
    #[serde(default)]
    pub auto_scaling_groups: auto_scaling_groups::Actual,
    #[serde(default, skip_serializing_if = "is_default")]
    pub termination_queue: termination::QueueActual,
    #[serde(default, skip_serializing_if = "is_default")]
    pub termination_rules: termination::RulesActual,
    #[serde(default, skip_serializing_if = "is_default")]
    pub lifecycle_hooks: termination::HooksActual,
}

/// Kinds a cluster may not have leave no trace in a recorded state.
fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// A shared resource (the VPC or a subnet the spec names by id) getting the cluster's `shared` tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedTag {
    /// How errors name it: `Vpc vpc-1 (spec.networkID)`.
    pub resource: String,
    pub kind: Kind,
    pub id: String,
    pub key: String,
}

impl SharedTag {
    /// Shared resources get `kubernetes.io/cluster/NAME=shared`, once; nothing else about them changes. One
    /// tagged as owned is refused: Ballast would delete it with the cluster.
    pub fn wanted(
        resource: &str,
        kind: Kind,
        id: &str,
        tags: &BTreeMap<String, String>,
        cluster: &str,
    ) -> Result<Option<SharedTag>, UpdateError> {
        let key = ownership_tag(cluster);
        match tags.get(&key).map(String::as_str) {
            Some("shared") => Ok(None),
            Some("owned") => Err(UpdateError::Missing {
                resource: resource.to_string(),
                message: "is tagged as owned by this cluster, but the spec names it as shared: Ballast would \
                          delete it with the cluster; retag it or remove it from the spec"
                    .to_string(),
            }),
            _ => Ok(Some(SharedTag {
                resource: resource.to_string(),
                kind,
                id: id.to_string(),
                key,
            })),
        }
    }

    pub async fn apply(&self, cloud: &Cloud) -> Result<(), UpdateError> {
        call(&self.resource, "CreateTags", || {
            cloud
                .ec2
                .create_tags()
                .resources(&self.id)
                .tags(ec2::Tag::builder().key(&self.key).value("shared").build())
                .send()
        })
        .await?;
        Ok(())
    }
}

impl Planned for SharedTag {
    fn planned(&self) -> Vec<Change> {
        // Shared resources are tagged in the first level of the plan, whatever their kind.
        vec![
            Change::new(Stage::Vpc, self.kind, &self.id, Action::TagShared)
                .field(&self.key, None, "shared"),
        ]
    }
}

impl SharedTag {
    /// The tag as Terraform: an `aws_ec2_tag` on the shared resource's id (the resource itself is not Terraform's).
    pub fn render_terraform(&self, terraform: &mut Terraform) -> Result<(), RenderError> {
        terraform.resource(
            "aws_ec2_tag",
            &tf_name(&format!("{}-shared-tag", self.id)),
            TfResource::new()
                .attr("key", self.key.as_str())
                .attr("resource_id", self.id.as_str())
                .attr("value", "shared"),
        )
    }
}

/// The cluster's tags and `Name`, as [`Target::tags_named`] gives them to AWS.
pub fn tags_named(model: &ClusterModel, name: &str) -> BTreeMap<String, String> {
    let mut tags = model.tags.clone();
    tags.insert("Name".to_string(), name.to_string());
    tags
}
