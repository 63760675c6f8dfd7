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

/// The cluster's Terraform. `api_dns` is the API load balancer's DNS name once Terraform has made it (node
/// specs name it; without it the groups' launch templates and Auto Scaling Groups wait: [`Terraform::deferred`]).
/// `keys` are the node keys of the cluster's keysets (`NodeKeys::default()`: never rotated).
pub async fn render_terraform(
    model: &ClusterModel,
    completed: &ClusterConfig,
    api_dns: Option<&str>,
    keys: &NodeKeys,
) -> Result<Rendered, UpdateError> {
    let (mut actual, images) = nothing_yet(model);
    actual.node_specs.keys = keys.clone();
    let known = Known {
        load_balancer_dns: api_dns.map(str::to_string),
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
