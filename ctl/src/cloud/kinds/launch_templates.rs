//! Launch templates, one per group: AMI, instance type, security group, instance profile, IMDSv2 with the
//! group's hop limit, an encrypted root volume mapped on the image's own root device name, the boot config as user-data, and TagSpecifications carrying
//! the node spec's hash. Compared with the default version's own data (not a tag of ours), so a change made by
//! hand shows too. A change is a new version made the default. Groups are found and applied in parallel.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types as ec2;
use ballast_state::node::BootConfig;
use base64::Engine as _;
use futures_util::future::join_all;
use serde::{Deserialize, Serialize};

use super::{tags_named, ActualState, Known, Target};
use crate::cloud::aws::{
    call, ec2_tags, filter, find as find_optional, owned_launch_templates, tag_map, tag_spec,
    GROUP_TAG, NODE_SPEC_HASH_TAG,
};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::{ClusterModel, GroupModel};
use crate::cloud::plan::{
    or_known_after_apply, Action, Change as PlanChange, Kind, Planned, Stage, KNOWN_AFTER_APPLY,
};
use crate::cloud::terraform::{
    reference, string_map, tf_name, value, values, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// A launch template of the cluster as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Template {
    pub id: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Its default version's fields, as a plan names them (`imageId`, `instanceType`, ...); read only for the
    /// templates of groups the spec has.
    #[serde(default)]
    pub default_version: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// The cluster's launch templates (tagged as owned), by name.
    #[serde(default)]
    pub templates: BTreeMap<String, Template>,
    /// AMI names the groups use, resolved to the newest image of that name (a name left out has none).
    #[serde(default)]
    pub images: BTreeMap<String, String>,
    /// The root device name of every image the groups use, by image id: `null` for an image described
    /// without one, left out for an id no image has. The root volume's mapping must name exactly this
    /// device, or the instance boots from the image's own unencrypted volume beside an unused one.
    #[serde(default)]
    pub root_devices: BTreeMap<String, Option<String>>,
}

/// Everything an instance launches with: what a launch template version holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    image_id: String,
    instance_type: String,
    security_group: Option<String>,
    instance_profile: Option<String>,
    http_tokens: String,
    hop_limit: i32,
    root_device: String,
    volume_size: i32,
    volume_type: String,
    /// Provisioned IOPS and throughput (MiB/s) when the spec sets them; else the type's own, left to AWS.
    volume_iops: Option<i32>,
    volume_throughput: Option<i32>,
    encrypted: bool,
    kms_key: Option<String>,
    user_data: Option<String>,
    node_spec_hash: Option<String>,
    instance_tags: BTreeMap<String, String>,
    network_interface_tags: BTreeMap<String, String>,
    /// The primary network interface asks for a public IP (`associatePublicIp`).
    public_ip: bool,
    /// Security groups besides the cluster's own, on the primary network interface with it.
    additional_security_groups: Vec<String>,
    /// Spot instances at most this price (market options), `maxPrice` without a mixed instances policy.
    spot_max_price: Option<String>,
    /// Extra EBS volumes (`spec.volumes`): block device mappings after the root volume's.
    volumes: Vec<ExtraVolume>,
}

/// One extra EBS volume of a group's instances, as its block device mapping holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraVolume {
    device: String,
    size: i32,
    volume_type: String,
    iops: Option<i32>,
    throughput: Option<i32>,
    encrypted: bool,
    kms_key: Option<String>,
    delete_on_termination: bool,
}

impl ExtraVolume {
    fn from_spec(volume: &ballast_state::spec::VolumeSpec) -> Self {
        // Validation bounds every number far below i32::MAX; the saturation only keeps the conversion total.
        let int = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        ExtraVolume {
            device: volume.device.clone(),
            size: volume.size.map_or(0, int),
            volume_type: volume
                .volume_type
                .clone()
                .unwrap_or_else(|| ballast_state::group_volumes::DEFAULT_VOLUME_TYPE.to_string()),
            iops: volume.iops.map(int),
            throughput: volume.throughput.map(int),
            encrypted: volume.encrypted.unwrap_or(true),
            kms_key: volume.key.clone(),
            delete_on_termination: volume.delete_on_termination.unwrap_or(true),
        }
    }

    /// How a plan shows it: the root volume's words, its key, and `kept` when it outlives its instance.
    fn field(&self) -> String {
        extra_volume_field(
            self.size,
            &self.volume_type,
            (self.iops, self.throughput),
            (self.encrypted, self.kms_key.as_deref()),
            self.delete_on_termination,
            &self.device,
        )
    }

    fn request(&self) -> ec2::LaunchTemplateBlockDeviceMappingRequest {
        let ebs = ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
            .volume_size(self.size)
            .volume_type(ec2::VolumeType::from(self.volume_type.as_str()))
            .set_iops(self.iops)
            .set_throughput(self.throughput)
            .encrypted(self.encrypted)
            .set_kms_key_id(self.kms_key.clone())
            .delete_on_termination(self.delete_on_termination);
        ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
            .device_name(&self.device)
            .ebs(ebs.build())
            .build()
    }

    fn terraform(&self) -> TfResource {
        let mut ebs = TfResource::new()
            .attr("delete_on_termination", self.delete_on_termination)
            .attr("encrypted", self.encrypted);
        if let Some(iops) = self.iops {
            ebs = ebs.attr("iops", i64::from(iops));
        }
        if let Some(key) = &self.kms_key {
            ebs = ebs.attr("kms_key_id", key.as_str());
        }
        if let Some(throughput) = self.throughput {
            ebs = ebs.attr("throughput", i64::from(throughput));
        }
        ebs = ebs
            .attr("volume_size", i64::from(self.size))
            .attr("volume_type", self.volume_type.as_str());
        TfResource::new()
            .attr("device_name", self.device.as_str())
            .block("ebs", ebs)
    }
}

/// How a plan shows an extra volume.
fn extra_volume_field(
    size: i32,
    volume_type: &str,
    performance: (Option<i32>, Option<i32>),
    (encrypted, key): (bool, Option<&str>),
    delete_on_termination: bool,
    device: &str,
) -> String {
    let mut field = root_volume_field(size, volume_type, performance, encrypted, device);
    if let Some(key) = key {
        field.push_str(&format!(" key {key}"));
    }
    if !delete_on_termination {
        field.push_str(" kept");
    }
    field
}

/// Fields a plan shows only when they are not their default (no public IP, no extra security group, on-demand),
/// so a template made before they existed reads as unchanged; gone from the spec, they show as `(none)`.
const OPTIONAL_FIELDS: [&str; 4] = [
    "associatePublicIp",
    "additionalSecurityGroups",
    "spotMaxPrice",
    "volumes",
];

/// One group's launch template to create (no `id`) or to give a new default version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub group: String,
    pub name: String,
    pub id: Option<String>,
    pub spec: LaunchSpec,
    /// Fields that differ: (field, value found, value wanted).
    pub fields: Vec<(&'static str, Option<String>, String)>,
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let action = if self.id.is_some() {
            Action::Update
        } else {
            Action::Create
        };
        let mut change = PlanChange::new(
            Stage::LaunchTemplates,
            Kind::LaunchTemplate,
            &self.name,
            action,
        );
        for (field, from, to) in &self.fields {
            change = change.field(field, from.clone(), to);
        }
        vec![change]
    }
}

pub async fn find(cloud: &Cloud, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let templates = owned_launch_templates(cloud, &model.cluster).await?;
    let wanted: BTreeSet<&str> = model
        .groups
        .iter()
        .map(|g| g.resource_name.as_str())
        .collect();
    let found: Vec<(String, String, BTreeMap<String, String>)> = templates
        .iter()
        .map(|t| {
            (
                t.launch_template_name().unwrap_or_default().to_string(),
                t.launch_template_id().unwrap_or_default().to_string(),
                tag_map(t.tags()),
            )
        })
        .collect();
    let wanted = &wanted;
    let versions = join_all(found.iter().map(|(name, id, _)| async move {
        if wanted.contains(name.as_str()) {
            default_version(cloud, &format!("LaunchTemplate {name}"), id).await
        } else {
            Ok(BTreeMap::new())
        }
    }))
    .await;
    let mut actual = Actual::default();
    for ((name, id, tags), version) in found.into_iter().zip(versions) {
        actual.templates.insert(
            name,
            Template {
                id,
                tags,
                default_version: version?,
            },
        );
    }
    resolve_images(cloud, model, &mut actual).await?;
    Ok(actual)
}

/// AMI names resolve to the newest image of that name the account can use; every image used, by name or
/// id, is described for its root device name.
async fn resolve_images(
    cloud: &Cloud,
    model: &ClusterModel,
    actual: &mut Actual,
) -> Result<(), UpdateError> {
    let (ids, names): (BTreeSet<&String>, BTreeSet<&String>) = model
        .groups
        .iter()
        .map(|g| &g.image)
        .partition(|i| i.starts_with("ami-"));
    for id in ids {
        let out = find_optional(
            &format!("image {id}"),
            "DescribeImages",
            &["InvalidAMIID.NotFound", "InvalidAMIID.Malformed"],
            || cloud.ec2.describe_images().image_ids(id.as_str()).send(),
        )
        .await?;
        if let Some(image) = out.as_ref().and_then(|o| o.images().first()) {
            actual
                .root_devices
                .insert(id.clone(), image.root_device_name().map(str::to_string));
        }
    }
    for name in names {
        let out = call(&format!("image {name:?}"), "DescribeImages", || {
            cloud
                .ec2
                .describe_images()
                .filters(filter("name", &[name]))
                .send()
        })
        .await?;
        let newest = out
            .images()
            .iter()
            .max_by(|a, b| a.creation_date().cmp(&b.creation_date()));
        if let Some((image, id)) = newest.and_then(|i| Some((i, i.image_id()?))) {
            actual.images.insert(name.clone(), id.to_string());
            actual
                .root_devices
                .insert(id.to_string(), image.root_device_name().map(str::to_string));
        }
    }
    Ok(())
}

/// The fields of a launch template's default version, as [`LaunchSpec::fields`] names them.
async fn default_version(
    cloud: &Cloud,
    resource: &str,
    id: &str,
) -> Result<BTreeMap<String, String>, UpdateError> {
    let out = call(resource, "DescribeLaunchTemplateVersions", || {
        cloud
            .ec2
            .describe_launch_template_versions()
            .launch_template_id(id)
            .versions("$Default")
            .send()
    })
    .await?;
    Ok(out
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .map(version_fields)
        .unwrap_or_default())
}

fn version_fields(data: &ec2::ResponseLaunchTemplateData) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    let mut set = |field: &str, value: String| fields.insert(field.to_string(), value);
    set("imageId", data.image_id().unwrap_or_default().to_string());
    set(
        "instanceType",
        data.instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
    );
    // Ballast's templates put the security groups on the primary network interface (with its public IP);
    // older ones had them on the template itself.
    let interface = data
        .network_interfaces()
        .iter()
        .find(|n| n.device_index().unwrap_or(0) == 0);
    let groups = interface
        .map(|n| n.groups())
        .filter(|g| !g.is_empty())
        .unwrap_or(data.security_group_ids());
    if let Some(group) = groups.first() {
        set("securityGroup", group.clone());
    }
    if groups.len() > 1 {
        set("additionalSecurityGroups", groups[1..].join(", "));
    }
    if interface.and_then(|n| n.associate_public_ip_address()) == Some(true) {
        set("associatePublicIp", "true".to_string());
    }
    if let Some(market) = data.instance_market_options() {
        if market.market_type() == Some(&ec2::MarketType::Spot) {
            let price = market
                .spot_options()
                .and_then(|s| s.max_price())
                .unwrap_or("on-demand price");
            set("spotMaxPrice", price.to_string());
        }
    }
    if let Some(profile) = data.iam_instance_profile() {
        let profile = profile.arn().or(profile.name()).unwrap_or_default();
        set("instanceProfile", profile.to_string());
    }
    if let Some(metadata) = data.metadata_options() {
        set(
            "metadata",
            format!(
                "httpTokens={} hopLimit={}",
                metadata.http_tokens().map(|t| t.as_str()).unwrap_or(""),
                metadata.http_put_response_hop_limit().unwrap_or(0)
            ),
        );
    }
    // Ballast maps the root volume first, then the extra volumes (`LaunchSpec::request_data`).
    let extra: Vec<String> = data
        .block_device_mappings()
        .iter()
        .skip(1)
        .filter_map(|mapping| {
            let ebs = mapping.ebs()?;
            Some(extra_volume_field(
                ebs.volume_size().unwrap_or(0),
                ebs.volume_type().map(|t| t.as_str()).unwrap_or(""),
                (ebs.iops(), ebs.throughput()),
                (ebs.encrypted() == Some(true), ebs.kms_key_id()),
                ebs.delete_on_termination() != Some(false),
                mapping.device_name().unwrap_or(""),
            ))
        })
        .collect();
    if !extra.is_empty() {
        set("volumes", extra.join(", "));
    }
    if let Some(mapping) = data.block_device_mappings().first() {
        if let Some(ebs) = mapping.ebs() {
            set(
                "rootVolume",
                root_volume_field(
                    ebs.volume_size().unwrap_or(0),
                    ebs.volume_type().map(|t| t.as_str()).unwrap_or(""),
                    (ebs.iops(), ebs.throughput()),
                    ebs.encrypted() == Some(true),
                    mapping.device_name().unwrap_or(""),
                ),
            );
        }
    }
    for (field, resource) in [
        ("instanceTags", ec2::ResourceType::Instance),
        ("networkInterfaceTags", ec2::ResourceType::NetworkInterface),
    ] {
        if let Some(spec) = data
            .tag_specifications()
            .iter()
            .find(|t| t.resource_type() == Some(&resource))
        {
            set(field, tags_field(&tag_map(spec.tags())));
        }
    }
    if let Some(user_data) = data.user_data() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(user_data)
            .unwrap_or_default();
        if let Ok(boot) = BootConfig::from_user_data(&String::from_utf8_lossy(&decoded)) {
            let hash = &boot.node_spec_sha256;
            set("nodeSpecSha256", hash[..12.min(hash.len())].to_string());
        }
    }
    fields
}

/// How a plan shows a set of tags: `key=value`, sorted by key, space-separated.
fn tags_field(tags: &BTreeMap<String, String>) -> String {
    tags.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How a plan shows a root volume: size, type, the IOPS and throughput set (none: the type's own), encryption
/// and the device it is mapped on.
fn root_volume_field(
    size: i32,
    volume_type: &str,
    (iops, throughput): (Option<i32>, Option<i32>),
    encrypted: bool,
    device: &str,
) -> String {
    let iops = iops.map(|v| format!(" {v} IOPS")).unwrap_or_default();
    let throughput = throughput
        .map(|v| format!(" {v} MiB/s"))
        .unwrap_or_default();
    let encrypted = if encrypted { " encrypted" } else { "" };
    format!("{size} GiB {volume_type}{iops}{throughput}{encrypted} on {device}")
}

/// The image id a group launches from: its `spec.image` when an id, else what that name resolved to.
fn image_id_of(group: &GroupModel, images: &BTreeMap<String, String>) -> Option<String> {
    if group.image.starts_with("ami-") {
        Some(group.image.clone())
    } else {
        images.get(&group.image).cloned()
    }
}

/// Fails when a group's image is missing (no image of that name, or no image with that id) or has no root
/// device name to map the encrypted root volume on; the error names the groups, the image and the fix.
fn check_images(model: &ClusterModel, actual: &Actual) -> Result<(), UpdateError> {
    let images: BTreeSet<&String> = model.groups.iter().map(|g| &g.image).collect();
    for image in images {
        let groups: Vec<&str> = model
            .groups
            .iter()
            .filter(|g| &g.image == image)
            .map(|g| g.name.as_str())
            .collect();
        let resource = format!(
            "InstanceGroup/{}: spec.image",
            groups.join(", InstanceGroup/")
        );
        let region = &model.region;
        let id = if image.starts_with("ami-") {
            image.clone()
        } else if let Some(id) = actual.images.get(image) {
            id.clone()
        } else {
            return Err(UpdateError::Missing {
                resource,
                message: format!(
                    "no AMI named {image:?} in {region}: bake one (packer/README.md) or set spec.image to an AMI id"
                ),
            });
        };
        let described = if id == *image {
            format!("AMI {id}")
        } else {
            format!("AMI {id} (named {image:?})")
        };
        match actual.root_devices.get(&id) {
            Some(Some(_)) => {}
            Some(None) => {
                return Err(UpdateError::Missing {
                    resource,
                    message: format!(
                        "{described} has no root device name, so its encrypted root volume cannot be mapped: \
                         register the image with a root device name (aws ec2 register-image --root-device-name) \
                         or choose another image"
                    ),
                })
            }
            None => {
                return Err(UpdateError::Missing {
                    resource,
                    message: format!(
                        "no {described} in {region} that this account can use: check the id, or bake one \
                         (packer/README.md)"
                    ),
                })
            }
        }
    }
    Ok(())
}

/// The launch templates' ids, by group.
pub fn learn(model: &ClusterModel, actual: &Actual, known: &mut Known) {
    for group in &model.groups {
        if let Some(template) = actual.templates.get(&group.resource_name) {
            known
                .launch_template_ids
                .insert(group.name.clone(), template.id.clone());
        }
    }
}

pub fn diff(
    model: &ClusterModel,
    known: &Known,
    actual: &Actual,
) -> Result<Vec<Change>, UpdateError> {
    check_images(model, actual)?;
    let mut changes = Vec::new();
    for group in &model.groups {
        let spec = launch_spec(model, group, actual, known);
        let found = actual.templates.get(&group.resource_name);
        let fields: Vec<(&'static str, Option<String>, String)> = spec
            .fields()
            .into_iter()
            .filter_map(|(field, value)| {
                let from = found.and_then(|t| t.default_version.get(field)).cloned();
                (from.as_deref() != Some(value.as_str())).then_some((field, from, value))
            })
            .chain(OPTIONAL_FIELDS.into_iter().filter_map(|field| {
                let from = found.and_then(|t| t.default_version.get(field))?;
                let wanted = spec.fields().iter().any(|(f, _)| *f == field);
                (!wanted).then(|| (field, Some(from.clone()), "(none)".to_string()))
            }))
            .collect();
        if fields.is_empty() && spec.is_complete() {
            continue;
        }
        changes.push(Change {
            group: group.name.clone(),
            name: group.resource_name.clone(),
            id: found.map(|t| t.id.clone()),
            spec,
            fields,
        });
    }
    Ok(changes)
}

fn launch_spec(
    model: &ClusterModel,
    group: &GroupModel,
    actual: &Actual,
    known: &Known,
) -> LaunchSpec {
    let image = image_id_of(group, &actual.images).unwrap_or_default();
    // check_images has made sure every group's image has one.
    let root_device = actual
        .root_devices
        .get(&image)
        .cloned()
        .flatten()
        .unwrap_or_default();
    let node_spec_hash = known.node_spec_hashes.get(&group.name).cloned();
    let user_data = node_spec_hash.as_ref().and_then(|hash| {
        BootConfig::for_group(
            &model.cluster,
            &group.name,
            group.role,
            &model.state.url(),
            hash,
        )
        .to_user_data()
        .ok()
    });
    let profile = group
        .shared_profile
        .clone()
        .or_else(|| known.profile_arns.get(&group.role).cloned());
    let mut instance_tags = group.tags.clone();
    if let Some(hash) = &node_spec_hash {
        instance_tags.insert(NODE_SPEC_HASH_TAG.to_string(), hash.clone());
    }
    LaunchSpec {
        image_id: image,
        instance_type: group.machine_type.clone(),
        security_group: known.security_group_ids.get(&group.role).cloned(),
        instance_profile: profile,
        http_tokens: if group.http_tokens_required {
            "required"
        } else {
            "optional"
        }
        .to_string(),
        hop_limit: group.hop_limit,
        root_device,
        volume_size: group.root_volume_size,
        volume_type: group.root_volume_type.clone(),
        volume_iops: group.root_volume_iops,
        volume_throughput: group.root_volume_throughput,
        encrypted: group.root_volume_encrypted,
        kms_key: group.root_volume_kms_key.clone(),
        user_data,
        node_spec_hash,
        instance_tags,
        network_interface_tags: group.network_interface_tags.clone(),
        public_ip: group.aws.public_ip,
        additional_security_groups: group.aws.additional_security_groups.clone(),
        spot_max_price: group.aws.spot_max_price.clone(),
        volumes: group.volumes.iter().map(ExtraVolume::from_spec).collect(),
    }
}

impl LaunchSpec {
    /// False while a value it needs only exists after apply.
    fn is_complete(&self) -> bool {
        self.security_group.is_some() && self.instance_profile.is_some() && self.user_data.is_some()
    }

    /// The fields shown in a plan, in order.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("imageId", self.image_id.clone()),
            ("instanceType", self.instance_type.clone()),
            (
                "securityGroup",
                or_known_after_apply(self.security_group.as_ref()),
            ),
            (
                "instanceProfile",
                or_known_after_apply(self.instance_profile.as_ref()),
            ),
            (
                "metadata",
                format!(
                    "httpTokens={} hopLimit={}",
                    self.http_tokens, self.hop_limit
                ),
            ),
            (
                "rootVolume",
                root_volume_field(
                    self.volume_size,
                    &self.volume_type,
                    (self.volume_iops, self.volume_throughput),
                    self.encrypted,
                    &self.root_device,
                ),
            ),
            ("instanceTags", tags_field(&self.instance_tags)),
            (
                "networkInterfaceTags",
                tags_field(&self.network_interface_tags),
            ),
        ];
        if self.public_ip {
            fields.push(("associatePublicIp", "true".to_string()));
        }
        if !self.additional_security_groups.is_empty() {
            fields.push((
                "additionalSecurityGroups",
                self.additional_security_groups.join(", "),
            ));
        }
        if let Some(price) = &self.spot_max_price {
            fields.push(("spotMaxPrice", price.clone()));
        }
        if !self.volumes.is_empty() {
            let volumes: Vec<String> = self.volumes.iter().map(ExtraVolume::field).collect();
            fields.push(("volumes", volumes.join(", ")));
        }
        fields.push((
            "nodeSpecSha256",
            self.node_spec_hash.as_ref().map_or_else(
                || KNOWN_AFTER_APPLY.to_string(),
                |h| h[..12.min(h.len())].to_string(),
            ),
        ));
        fields
    }

    /// The cluster's security group, then the additional ones.
    fn security_groups(&self) -> Vec<String> {
        self.security_group
            .iter()
            .chain(&self.additional_security_groups)
            .cloned()
            .collect()
    }

    fn request_data(&self) -> ec2::RequestLaunchTemplateData {
        let mut ebs = ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
            .volume_size(self.volume_size)
            .volume_type(ec2::VolumeType::from(self.volume_type.as_str()))
            .set_iops(self.volume_iops)
            .set_throughput(self.volume_throughput)
            .encrypted(self.encrypted)
            .delete_on_termination(true);
        if let Some(key) = &self.kms_key {
            ebs = ebs.kms_key_id(key);
        }
        let profile = self.instance_profile.clone().unwrap_or_default();
        let profile_spec = if profile.starts_with("arn:") {
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder().arn(profile)
        } else {
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder().name(profile)
        };
        let tagged = |resource, tags: &BTreeMap<String, String>| {
            ec2::LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(resource)
                .set_tags(Some(ec2_tags(tags)))
                .build()
        };
        ec2::RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .instance_type(ec2::InstanceType::from(self.instance_type.as_str()))
            // The security groups go on the interface: EC2 refuses them on the template beside an interface.
            .network_interfaces(
                ec2::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .associate_public_ip_address(self.public_ip)
                    .delete_on_termination(true)
                    .set_groups(Some(self.security_groups()))
                    .build(),
            )
            .set_instance_market_options(self.spot_max_price.as_ref().map(|price| {
                ec2::LaunchTemplateInstanceMarketOptionsRequest::builder()
                    .market_type(ec2::MarketType::Spot)
                    .spot_options(
                        ec2::LaunchTemplateSpotMarketOptionsRequest::builder()
                            .max_price(price)
                            .build(),
                    )
                    .build()
            }))
            .iam_instance_profile(profile_spec.build())
            .metadata_options(
                ec2::LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(ec2::LaunchTemplateInstanceMetadataEndpointState::Enabled)
                    .http_tokens(ec2::LaunchTemplateHttpTokensState::from(
                        self.http_tokens.as_str(),
                    ))
                    .http_put_response_hop_limit(self.hop_limit)
                    .build(),
            )
            // The root volume first: `version_fields` reads the first mapping as the root volume's.
            .set_block_device_mappings(Some(
                std::iter::once(
                    ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
                        .device_name(&self.root_device)
                        .ebs(ebs.build())
                        .build(),
                )
                .chain(self.volumes.iter().map(ExtraVolume::request))
                .collect(),
            ))
            .user_data(
                base64::engine::general_purpose::STANDARD
                    .encode(self.user_data.clone().unwrap_or_default()),
            )
            .tag_specifications(tagged(ec2::ResourceType::Instance, &self.instance_tags))
            .tag_specifications(tagged(ec2::ResourceType::Volume, &self.instance_tags))
            .tag_specifications(tagged(
                ec2::ResourceType::NetworkInterface,
                &self.network_interface_tags,
            ))
            .build()
    }
}

/// Creates or versions every group's template, in parallel.
pub async fn apply(
    target: &Target<'_>,
    changes: &[Change],
    known: &mut Known,
) -> Result<(), UpdateError> {
    let results = join_all(changes.iter().map(|change| apply_one(target, change))).await;
    for (change, result) in changes.iter().zip(results) {
        known
            .launch_template_ids
            .insert(change.group.clone(), result?);
    }
    Ok(())
}

/// One group's template; returns its id.
async fn apply_one(target: &Target<'_>, change: &Change) -> Result<String, UpdateError> {
    let ec2c = &target.cloud.ec2;
    let resource = format!("LaunchTemplate {}", change.name);
    let data = change.spec.request_data();
    match &change.id {
        None => {
            let mut tags = target.tags_named(&change.name);
            tags.insert(GROUP_TAG.to_string(), change.group.clone());
            let created = call(&resource, "CreateLaunchTemplate", || {
                ec2c.create_launch_template()
                    .launch_template_name(&change.name)
                    .launch_template_data(data.clone())
                    .tag_specifications(tag_spec(ec2::ResourceType::LaunchTemplate, &tags))
                    .send()
            })
            .await?;
            Ok(created
                .launch_template()
                .and_then(|t| t.launch_template_id())
                .unwrap_or_default()
                .to_string())
        }
        Some(id) => {
            let version = call(&resource, "CreateLaunchTemplateVersion", || {
                ec2c.create_launch_template_version()
                    .launch_template_id(id)
                    .launch_template_data(data.clone())
                    .send()
            })
            .await?;
            let number = version
                .launch_template_version()
                .and_then(|v| v.version_number())
                .unwrap_or_default();
            call(&resource, "ModifyLaunchTemplate", || {
                ec2c.modify_launch_template()
                    .launch_template_id(id)
                    .default_version(number.to_string())
                    .send()
            })
            .await?;
            Ok(id.clone())
        }
    }
}

/// Deletes a launch template with all its versions (`delete cluster`).
pub async fn delete(
    cloud: &Cloud,
    template: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    super::deletion::attempt(&template.label(), "DeleteLaunchTemplate", || {
        cloud
            .ec2
            .delete_launch_template()
            .launch_template_id(&template.id)
            .send()
    })
    .await
}

/// The groups' launch templates, all versions.
impl super::task::Delete for LaunchTemplatesTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::LaunchTemplate])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete(deleting.cloud, resource))
    }
}

/// A block only when there is one to write (`instance_market_options` of a spot group), and as many blocks of
/// one name as there are (the extra volumes' `block_device_mappings`).
trait BlockIf {
    fn block_if(self, block: Option<(&str, TfResource)>) -> Self;
    fn blocks(self, name: &str, blocks: impl Iterator<Item = TfResource>) -> Self;
}

impl BlockIf for TfResource {
    fn block_if(self, block: Option<(&str, TfResource)>) -> Self {
        match block {
            Some((name, body)) => self.block(name, body),
            None => self,
        }
    }

    fn blocks(self, name: &str, blocks: impl Iterator<Item = TfResource>) -> Self {
        blocks.fold(self, |resource, body| resource.block(name, body))
    }
}

/// The groups' launch templates, as a [`Task`].
pub struct LaunchTemplatesTask;

impl Task for LaunchTemplatesTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.launch_templates
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.launch_templates = actual;
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
        known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        diff(wanted.model, known, actual)
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
            if change.id.is_some() {
                return Err(RenderError::NotACreate {
                    resource: format!("LaunchTemplate {}", change.name),
                    action: "a new version",
                });
            }
            let spec = &change.spec;
            // The user-data names the node spec by its hash, and the node spec names the load balancer's DNS
            // name: until the load balancer exists, the group waits (Terraform::defer).
            let Some(user_data) = &spec.user_data else {
                terraform.defer(&change.group);
                continue;
            };
            let tf = tf_name(&change.name);
            let mut ebs = TfResource::new()
                .attr("delete_on_termination", true)
                .attr("encrypted", spec.encrypted);
            if let Some(iops) = spec.volume_iops {
                ebs = ebs.attr("iops", i64::from(iops));
            }
            if let Some(key) = &spec.kms_key {
                ebs = ebs.attr("kms_key_id", key.as_str());
            }
            if let Some(throughput) = spec.volume_throughput {
                ebs = ebs.attr("throughput", i64::from(throughput));
            }
            ebs = ebs
                .attr("volume_size", i64::from(spec.volume_size))
                .attr("volume_type", spec.volume_type.as_str());
            let profile = spec.instance_profile.clone().unwrap_or_default();
            let profile_attr = if profile.starts_with("arn:") || profile.starts_with("${") {
                "arn"
            } else {
                "name"
            };
            let mut tags = tags_named(wanted.model, &change.name);
            tags.insert(GROUP_TAG.to_string(), change.group.clone());
            let tagged = |resource: &str, tags: &BTreeMap<String, String>| {
                TfResource::new()
                    .attr("resource_type", resource)
                    .attr("tags", string_map(tags))
            };
            terraform.resource(
                "aws_launch_template",
                &tf,
                TfResource::new()
                    .attr("image_id", value(&spec.image_id))
                    .attr("instance_type", spec.instance_type.as_str())
                    .attr("name", change.name.as_str())
                    .attr("tags", string_map(&tags))
                    .attr(
                        "user_data",
                        base64::engine::general_purpose::STANDARD.encode(user_data),
                    )
                    .block(
                        "block_device_mappings",
                        TfResource::new()
                            .attr("device_name", value(&spec.root_device))
                            .block("ebs", ebs),
                    )
                    .blocks(
                        "block_device_mappings",
                        spec.volumes.iter().map(ExtraVolume::terraform),
                    )
                    .block(
                        "iam_instance_profile",
                        TfResource::new().attr(profile_attr, value(&profile)),
                    )
                    .block_if(spec.spot_max_price.as_ref().map(|price| {
                        (
                            "instance_market_options",
                            TfResource::new().attr("market_type", "spot").block(
                                "spot_options",
                                TfResource::new().attr("max_price", price.as_str()),
                            ),
                        )
                    }))
                    .block(
                        "network_interfaces",
                        TfResource::new()
                            .attr("associate_public_ip_address", spec.public_ip)
                            .attr("delete_on_termination", true)
                            .attr("security_groups", values(&spec.security_groups())),
                    )
                    .block(
                        "metadata_options",
                        TfResource::new()
                            .attr("http_endpoint", "enabled")
                            .attr("http_put_response_hop_limit", i64::from(spec.hop_limit))
                            .attr("http_tokens", spec.http_tokens.as_str()),
                    )
                    .block(
                        "tag_specifications",
                        tagged("instance", &spec.instance_tags),
                    )
                    .block("tag_specifications", tagged("volume", &spec.instance_tags))
                    .block(
                        "tag_specifications",
                        tagged("network-interface", &spec.network_interface_tags),
                    ),
            )?;
            known.launch_template_ids.insert(
                change.group.clone(),
                reference("aws_launch_template", &tf, "id"),
            );
        }
        Ok(())
    }
}
