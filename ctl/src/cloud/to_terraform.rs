//! `update cluster --target terraform`, pure: the cluster's Terraform from its model and completed spec, with no
//! AWS call. The engine plans against an actual state in which nothing of the cluster exists yet, except what the
//! spec names as shared (the VPC, subnets: they exist, untagged) and the images (resolved by Terraform's
//! `aws_ami` data sources, as the direct apply resolves them by DescribeImages), and renders every change as
//! Terraform ([`super::engine::plan_terraform`]). The plan it returns is the direct apply's plan of the same
//! cluster from nothing: the equivalence test compares the two, resource by resource.

use std::collections::BTreeMap;

use ballast_state::keyset::NodeKeys;
use ballast_state::spec::ClusterConfig;

use super::engine::plan_terraform;
use super::error::UpdateError;
use super::kinds::{network, subnets, ActualState, Known};
use super::model::{ClusterModel, VpcModel};
use super::plan::Plan;
use super::terraform::{data_reference, tf_name, values, Resource, Terraform};

/// What `--target terraform` renders.
#[derive(Debug)]
pub struct Rendered {
    /// The direct apply's plan of the same cluster from nothing (ids are Terraform references).
    pub plan: Plan,
    pub terraform: Terraform,
    /// `(file name, text)`, in `terraform fmt`'s layout.
    pub files: Vec<(String, String)>,
}

/// What the rendering reads besides the spec, read by the caller (read-only) so the rendering itself stays pure.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The API load balancer's DNS name once Terraform has made it (node specs name it; without it the groups'
    /// launch templates and Auto Scaling Groups wait: [`Terraform::deferred`]).
    pub api_dns: Option<String>,
    /// The node keys of the cluster's keysets (`NodeKeys::default()`: never rotated).
    pub keys: NodeKeys,
    /// IRSA: the service-account public keys (PEM, primary first) the JWKS publishes
    /// ([`super::kinds::oidc_discovery::service_account_public_keys`]).
    pub service_account_keys: Vec<String>,
    /// IRSA with the OIDC provider: an instance profile's ARN once Terraform has made it, whose account and
    /// partition the node specs' role ARNs (the add-ons', the service accounts') are in.
    pub instance_profile_arn: Option<String>,
}

/// The cluster's Terraform, with no IRSA inputs: see [`render`].
pub async fn render_terraform(
    model: &ClusterModel,
    completed: &ClusterConfig,
    api_dns: Option<&str>,
    keys: &NodeKeys,
) -> Result<Rendered, UpdateError> {
    let inputs = Inputs {
        api_dns: api_dns.map(str::to_string),
        keys: keys.clone(),
        ..Inputs::default()
    };
    render(model, completed, &inputs).await
}

/// The cluster's Terraform. With IRSA's provider on and the load balancer made, the node specs name the roles'
/// ARNs, so an instance profile's ARN must be given: refused without one, rather than specs that leave the
/// add-ons no role.
pub async fn render(
    model: &ClusterModel,
    completed: &ClusterConfig,
    inputs: &Inputs,
) -> Result<Rendered, UpdateError> {
    if inputs.api_dns.is_some()
        && inputs.instance_profile_arn.is_none()
        && ballast_state::irsa::addons_on_irsa(&completed.cluster.spec)
    {
        return Err(UpdateError::Missing {
            resource: format!("Cluster/{}", model.cluster),
            message: "the node specs name the IRSA roles' ARNs, in the account of the instance profiles, and no \
                      instance profile's ARN was given: run `terraform apply` first (it makes the profiles), then \
                      `update cluster --target terraform --yes` again"
                .to_string(),
        });
    }
    let (mut actual, images) = nothing_yet(model);
    actual.node_specs.keys = inputs.keys.clone();
    actual.oidc_discovery.public_keys = inputs.service_account_keys.clone();
    let known = Known {
        load_balancer_dns: inputs.api_dns.clone(),
        given_profile_arn: inputs.instance_profile_arn.clone(),
        ..Known::default()
    };
    let (plan, mut terraform) = plan_terraform(model, completed, &actual, known).await?;
    for (name, image) in images {
        terraform.data("aws_ami", &name, image);
    }
    let files = terraform.files()?;
    Ok(Rendered {
        plan,
        terraform,
        files,
    })
}

/// The actual state Terraform starts from: none of the cluster's own resources; the shared VPC and subnets as
/// the spec names them (not yet tagged); every image the groups use resolved by an `aws_ami` data source (returned
/// by name, for the Terraform).
pub fn nothing_yet(model: &ClusterModel) -> (ActualState, Vec<(String, Resource)>) {
    let mut images = Vec::new();
    let mut actual = ActualState::default();
    if let VpcModel::Shared { id } = &model.vpc {
        actual.network.shared = Some(network::Vpc {
            id: id.clone(),
            cidr: String::new(),
            tags: BTreeMap::new(),
        });
    }
    for subnet in &model.subnets {
        if let Some(id) = &subnet.shared_id {
            actual.subnets.shared.insert(
                id.clone(),
                subnets::Subnet {
                    id: id.clone(),
                    cidr: subnet.cidr.clone().unwrap_or_default(),
                    zone: subnet.zone.clone(),
                    tags: BTreeMap::new(),
                },
            );
        }
    }
    for group in &model.groups {
        let name = tf_name(&group.image);
        let filter = if group.image.starts_with("ami-") {
            "image-id"
        } else {
            "name"
        };
        images.push((
            name.clone(),
            Resource::new().attr("most_recent", true).block(
                "filter",
                Resource::new()
                    .attr("name", filter)
                    .attr("values", values(&[group.image.as_str()])),
            ),
        ));
        let id = data_reference("aws_ami", &name, "id");
        let root_device = data_reference("aws_ami", &name, "root_device_name");
        let key = if group.image.starts_with("ami-") {
            group.image.clone()
        } else {
            actual
                .launch_templates
                .images
                .insert(group.image.clone(), id.clone());
            id
        };
        actual
            .launch_templates
            .root_devices
            .insert(key, Some(root_device));
    }
    (actual, images)
}
