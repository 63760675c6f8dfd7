//! etcd's EBS volumes, one per member, in the zone of the member's control-plane group: encrypted (with the
//! spec's `etcd.kmsKeyId` when set), `etcd.volumeSize` GiB of `etcd.volumeType`, tagged with the cluster's
//! ownership tag (so `delete cluster` finds them), the member and its group. nodeup on the group's instance finds
//! the volume by those tags and attaches it before etcd starts (`docs/etcd.md`, "Volumes").
//!
//! A volume holds a member's data, so nothing here ever replaces or shrinks one: a size may grow, and a type,
//! IOPS and throughput (`etcd.volumeIops`, `etcd.volumeThroughput`; unset: gp3's baseline) change in place
//! (ModifyVolume); a smaller size, another zone, encryption or key is refused, naming the spec
//! field. Volumes of members the spec no longer has are left alone: their data is the operator's to delete.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types as ec2;
use ballast_state::etcd_volume::{
    member_volume_tags, volume_name, ETCD_KMS_KEY_TAG, ETCD_MEMBER_TAG,
};
use ballast_state::spec::ClusterConfig;
use serde::{Deserialize, Serialize};

use super::{ActualState, Known, Target};
use crate::cloud::aws::{call, failure, filter, owned_filter, tag_map, tag_spec};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::task::{Finder, Task, Wanted};
use crate::cloud::model::ClusterModel;
use crate::cloud::plan::{Action, Change as PlanChange, Kind, Planned, Stage};
use crate::cloud::terraform::{
    string_map, tf_name, RenderError, Resource as TfResource, Terraform,
};
use crate::cloud::Cloud;

/// A member's volume as the spec wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedVolume {
    pub member: String,
    pub group: String,
    /// Its `Name` tag: `<member>.etcd.<cluster>`.
    pub name: String,
    pub zone: String,
    pub size_gib: i32,
    pub volume_type: String,
    /// `etcd.volumeIops` and `etcd.volumeThroughput` (MiB/s) as set; unset: the type's own, left to AWS.
    pub iops: Option<i32>,
    pub throughput: Option<i32>,
    pub encrypted: bool,
    /// The spec's `etcd.kmsKeyId`, as written.
    pub kms_key_id: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// A volume of the cluster's etcd as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Volume {
    pub id: String,
    pub zone: String,
    pub size_gib: i32,
    pub volume_type: String,
    /// The IOPS and throughput (MiB/s) EC2 reports; a gp3 volume reported without them has gp3's baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i32>,
    pub encrypted: bool,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Actual {
    /// The cluster's owned volumes tagged with an etcd member, by member.
    #[serde(default)]
    pub volumes: BTreeMap<String, Vec<Volume>>,
}

/// One volume's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create(WantedVolume),
    /// ModifyVolume: a larger size, another type, IOPS or throughput (`None`: unchanged; each `(from, to)`); the
    /// data stays.
    Modify {
        wanted: WantedVolume,
        id: String,
        size_gib: Option<(i32, i32)>,
        volume_type: Option<(String, String)>,
        iops: Option<(i32, i32)>,
        throughput: Option<(i32, i32)>,
    },
    /// Tags the volume lacks or that differ (CreateTags).
    Tag {
        wanted: WantedVolume,
        id: String,
        tags: BTreeMap<String, String>,
    },
}

impl Planned for Change {
    fn planned(&self) -> Vec<PlanChange> {
        let line = |wanted: &WantedVolume, action| {
            PlanChange::new(Stage::EtcdVolumes, Kind::EtcdVolume, &wanted.name, action)
        };
        let change = match self {
            Change::Create(wanted) => {
                let mut change = line(wanted, Action::Create)
                    .field("member", None, &wanted.member)
                    .field("zone", None, &wanted.zone)
                    .field("size", None, format!("{} GiB", wanted.size_gib))
                    .field("type", None, &wanted.volume_type);
                if let Some(iops) = wanted.iops {
                    change = change.field("iops", None, iops.to_string());
                }
                if let Some(throughput) = wanted.throughput {
                    change = change.field("throughput", None, format!("{throughput} MiB/s"));
                }
                change
                    .field("encrypted", None, wanted.encrypted.to_string())
                    .field(
                        "kmsKeyId",
                        None,
                        wanted
                            .kms_key_id
                            .clone()
                            .unwrap_or_else(|| "(the account's default EBS key)".to_string()),
                    )
            }
            Change::Modify {
                wanted,
                size_gib,
                volume_type,
                iops,
                throughput,
                ..
            } => {
                let mut change = line(wanted, Action::Update);
                if let Some((from, to)) = size_gib {
                    change = change.field("size", Some(format!("{from} GiB")), format!("{to} GiB"));
                }
                if let Some((from, to)) = volume_type {
                    change = change.field("type", Some(from.clone()), to);
                }
                if let Some((from, to)) = iops {
                    change = change.field("iops", Some(from.to_string()), to.to_string());
                }
                if let Some((from, to)) = throughput {
                    change = change.field(
                        "throughput",
                        Some(format!("{from} MiB/s")),
                        format!("{to} MiB/s"),
                    );
                }
                change
            }
            Change::Tag { wanted, tags, .. } => tags
                .iter()
                .fold(line(wanted, Action::Update), |change, (key, value)| {
                    change.field(&format!("tag {key}"), None, value)
                }),
        };
        vec![change]
    }
}

/// The volumes the spec wants: one per etcd member, in its group's zone. A control-plane group whose subnets
/// span zones is refused: its instance could come up in a zone its volume is not in, and EBS volumes attach only
/// within their zone.
pub fn wanted(
    completed: &ClusterConfig,
    model: &ClusterModel,
) -> Result<Vec<WantedVolume>, UpdateError> {
    let etcd = completed.cluster.spec.etcd.clone().unwrap_or_default();
    let zone_of: BTreeMap<&str, &str> = model
        .subnets
        .iter()
        .map(|s| (s.name.as_str(), s.zone.as_str()))
        .collect();
    let mut volumes = Vec::new();
    for member in &etcd.members {
        let group = model
            .groups
            .iter()
            .find(|g| g.name == member.instance_group)
            .ok_or_else(|| UpdateError::Missing {
                resource: format!("etcd member {}", member.name),
                message: format!(
                    "its instance group {:?} is not in the spec (spec.etcd.members)",
                    member.instance_group
                ),
            })?;
        let zones: BTreeSet<&str> = group
            .subnets
            .iter()
            .filter_map(|s| zone_of.get(s.as_str()).copied())
            .collect();
        let zone = match zones.len() {
            1 => zones.iter().next().copied().unwrap_or_default().to_string(),
            _ => {
                return Err(UpdateError::Refused {
                    resource: format!("InstanceGroup/{}", group.name),
                    field: "spec.subnets",
                    message: format!(
                        "a control-plane group must be in exactly one zone (found {}: {}): its etcd member's \
                         volume lives in one zone and only an instance of that zone can attach it; list \
                         subnets of one zone",
                        zones.len(),
                        zones.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        };
        let mut tags = model.tags.clone();
        tags.extend(member_volume_tags(
            &model.cluster,
            &member.name,
            &group.name,
            etcd.kms_key_id.as_deref(),
        ));
        volumes.push(WantedVolume {
            member: member.name.clone(),
            group: group.name.clone(),
            name: volume_name(&member.name, &model.cluster),
            zone,
            size_gib: i32::try_from(etcd.volume_size.unwrap_or_default()).unwrap_or(i32::MAX),
            volume_type: etcd.volume_type.clone().unwrap_or_default(),
            iops: etcd
                .volume_iops
                .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
            throughput: etcd
                .volume_throughput
                .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
            encrypted: etcd.encrypted_volume.unwrap_or(true),
            kms_key_id: etcd.kms_key_id.clone(),
            tags,
        });
    }
    Ok(volumes)
}

fn volume_of(volume: &ec2::Volume) -> Volume {
    Volume {
        id: volume.volume_id().unwrap_or_default().to_string(),
        zone: volume.availability_zone().unwrap_or_default().to_string(),
        size_gib: volume.size().unwrap_or_default(),
        volume_type: volume
            .volume_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        iops: volume.iops(),
        throughput: volume.throughput(),
        encrypted: volume.encrypted().unwrap_or(false),
        tags: tag_map(volume.tags()),
    }
}

/// The cluster's owned volumes that carry an etcd member tag, deleted ones left out.
pub async fn find(cloud: &Cloud, model: &ClusterModel) -> Result<Actual, UpdateError> {
    let cluster = &model.cluster;
    let mut actual = Actual::default();
    let mut pages = cloud
        .ec2
        .describe_volumes()
        .filters(owned_filter(cluster))
        .filters(filter("tag-key", &[ETCD_MEMBER_TAG]))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page =
            page.map_err(|e| failure(&format!("etcd volumes of {cluster}"), "DescribeVolumes", e))?;
        for volume in page.volumes() {
            if matches!(
                volume.state(),
                Some(ec2::VolumeState::Deleting | ec2::VolumeState::Deleted)
            ) {
                continue;
            }
            let volume = volume_of(volume);
            if let Some(member) = volume.tags.get(ETCD_MEMBER_TAG).cloned() {
                actual.volumes.entry(member).or_default().push(volume);
            }
        }
    }
    Ok(actual)
}

/// What to change so every member has its volume as the spec says (pure). Refuses what would lose or cannot
/// keep a member's data: a smaller size, another zone, encryption or KMS key; two volumes for one member.
pub fn diff(wanted: &[WantedVolume], actual: &Actual) -> Result<Vec<Change>, UpdateError> {
    let mut changes = Vec::new();
    for want in wanted {
        let found = actual
            .volumes
            .get(&want.member)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let volume = match found {
            [] => {
                changes.push(Change::Create(want.clone()));
                continue;
            }
            [volume] => volume,
            more => {
                return Err(UpdateError::Duplicate {
                    resource: format!("EtcdVolume {}", want.name),
                    count: more.len(),
                    ids: more
                        .iter()
                        .map(|v| v.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        };
        refuse_what_cannot_change(want, volume)?;
        let size_gib =
            (volume.size_gib < want.size_gib).then_some((volume.size_gib, want.size_gib));
        let volume_type = (volume.volume_type != want.volume_type)
            .then(|| (volume.volume_type.clone(), want.volume_type.clone()));
        let (iops, throughput) = performance_changes(want, volume);
        if size_gib.is_some() || volume_type.is_some() || iops.is_some() || throughput.is_some() {
            changes.push(Change::Modify {
                wanted: want.clone(),
                id: volume.id.clone(),
                size_gib,
                volume_type,
                iops,
                throughput,
            });
        }
        let tags: BTreeMap<String, String> = want
            .tags
            .iter()
            .filter(|(key, value)| volume.tags.get(*key) != Some(*value))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        if !tags.is_empty() {
            changes.push(Change::Tag {
                wanted: want.clone(),
                id: volume.id.clone(),
                tags,
            });
        }
    }
    Ok(changes)
}

/// A value to change, `(from, to)`, or `None`: unchanged.
type Transition = Option<(i32, i32)>;

/// The IOPS and throughput to change, each `(from, to)`, compared as the volume will have them: the spec's or the
/// wanted type's baseline, against what EC2 reports or (reported without, or of another type) the baseline a
/// volume of the wanted type gets. A type whose performance is not set (gp2) changes neither.
fn performance_changes(want: &WantedVolume, volume: &Volume) -> (Transition, Transition) {
    let as_i32 = |v: Option<u32>| v.map(|v| i32::try_from(v).unwrap_or(i32::MAX));
    let (base_iops, base_throughput) = ballast_state::ebs::baseline(&want.volume_type);
    let (base_iops, base_throughput) = (as_i32(base_iops), as_i32(base_throughput));
    let same_type = volume.volume_type == want.volume_type;
    let have = |reported: Option<i32>, base: Option<i32>| {
        if same_type {
            reported.or(base)
        } else {
            base
        }
    };
    let change = |wanted: Option<i32>, reported: Option<i32>, base: Option<i32>| {
        let wanted = wanted.or(base)?;
        let have = have(reported, base)?;
        (have != wanted).then_some((have, wanted))
    };
    (
        change(want.iops, volume.iops, base_iops),
        change(want.throughput, volume.throughput, base_throughput),
    )
}

/// A member's volume is never replaced: what AWS cannot change in place is refused, by spec field.
fn refuse_what_cannot_change(want: &WantedVolume, volume: &Volume) -> Result<(), UpdateError> {
    let refused = |field: &'static str, from: String, to: String, why: &'static str| {
        Err(UpdateError::VolumeRefused {
            resource: format!("EtcdVolume {} ({})", want.name, volume.id),
            field,
            from,
            to,
            why,
        })
    };
    if volume.zone != want.zone {
        return refused(
            "spec.subnets of the member's control-plane group",
            volume.zone.clone(),
            want.zone.clone(),
            "an EBS volume cannot move to another zone",
        );
    }
    if volume.size_gib > want.size_gib {
        return refused(
            "spec.etcd.volumeSize",
            format!("{} GiB", volume.size_gib),
            format!("{} GiB", want.size_gib),
            "an EBS volume cannot shrink",
        );
    }
    if volume.encrypted != want.encrypted {
        return refused(
            "spec.etcd.encryptedVolume",
            volume.encrypted.to_string(),
            want.encrypted.to_string(),
            "EBS cannot change a volume's encryption in place",
        );
    }
    let key_of = |key: Option<&String>| {
        key.cloned()
            .unwrap_or_else(|| "(the account's default EBS key)".to_string())
    };
    if volume.tags.get(ETCD_KMS_KEY_TAG) != want.kms_key_id.as_ref() {
        return refused(
            "spec.etcd.kmsKeyId",
            key_of(volume.tags.get(ETCD_KMS_KEY_TAG)),
            key_of(want.kms_key_id.as_ref()),
            "EBS cannot change a volume's KMS key in place",
        );
    }
    Ok(())
}

pub async fn apply(target: &Target<'_>, changes: &[Change]) -> Result<(), UpdateError> {
    let ec2c = &target.cloud.ec2;
    for change in changes {
        match change {
            Change::Create(want) => {
                let resource = format!("EtcdVolume {}", want.name);
                call(&resource, "CreateVolume", || {
                    ec2c.create_volume()
                        .availability_zone(&want.zone)
                        .size(want.size_gib)
                        .volume_type(ec2::VolumeType::from(want.volume_type.as_str()))
                        .set_iops(want.iops)
                        .set_throughput(want.throughput)
                        .encrypted(want.encrypted)
                        .set_kms_key_id(want.kms_key_id.clone())
                        .tag_specifications(tag_spec(ec2::ResourceType::Volume, &want.tags))
                        .send()
                })
                .await?;
            }
            Change::Modify {
                wanted,
                id,
                size_gib,
                volume_type,
                iops,
                throughput,
            } => {
                let resource = format!("EtcdVolume {} ({id})", wanted.name);
                call(&resource, "ModifyVolume", || {
                    ec2c.modify_volume()
                        .volume_id(id)
                        .set_size(size_gib.as_ref().map(|(_, to)| *to))
                        .set_volume_type(
                            volume_type
                                .as_ref()
                                .map(|(_, to)| ec2::VolumeType::from(to.as_str())),
                        )
                        .set_iops(iops.map(|(_, to)| to))
                        .set_throughput(throughput.map(|(_, to)| to))
                        .send()
                })
                .await?;
            }
            Change::Tag { wanted, id, tags } => {
                let resource = format!("EtcdVolume {} ({id})", wanted.name);
                call(&resource, "CreateTags", || {
                    ec2c.create_tags()
                        .resources(id)
                        .set_tags(Some(crate::cloud::aws::ec2_tags(tags)))
                        .send()
                })
                .await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// A "not yet" of our own making: the volume is being detached, a later round deletes it.
fn detaching(volume: &super::deletion::Resource) -> super::deletion::Failed {
    super::deletion::Failed {
        outcome: super::deletion::Outcome::NotYet,
        error: UpdateError::Missing {
            resource: volume.label(),
            message: "is being detached; deleted in a later round".to_string(),
        },
    }
}

/// Deletes a volume (`delete cluster`: etcd's, and the EBS CSI driver's tagged for the cluster); one still
/// attached (its instance is gone by now: volumes wait for instances) is detached first, and deleted in a later
/// round.
pub async fn delete(
    cloud: &Cloud,
    volume: &super::deletion::Resource,
) -> Result<(), super::deletion::Failed> {
    use super::deletion::attempt;
    let label = volume.label();
    match volume.state.as_deref() {
        Some("in-use") => {
            attempt(&label, "DetachVolume", || {
                cloud
                    .ec2
                    .detach_volume()
                    .volume_id(&volume.id)
                    .force(true)
                    .send()
            })
            .await?;
            Err(detaching(volume))
        }
        Some("detaching" | "creating") => Err(detaching(volume)),
        _ => {
            attempt(&label, "DeleteVolume", || {
                cloud.ec2.delete_volume().volume_id(&volume.id).send()
            })
            .await
        }
    }
}

/// Every volume carrying the cluster's ownership tag: etcd's (found only when the cluster itself is deleted,
/// never by `--prune`) and the EBS CSI driver's.
impl super::task::Delete for EtcdVolumesTask {
    fn deletes(&self) -> super::task::Deletes {
        super::task::Deletes::Kinds(&[super::deletion::ResourceKind::Volume])
    }

    fn delete<'a>(
        &'a self,
        deleting: super::task::Deleting<'a>,
        resource: &'a super::deletion::Resource,
    ) -> super::task::DeleteFuture<'a> {
        Box::pin(delete(deleting.cloud, resource))
    }
}

/// etcd's volumes as a [`Task`].
pub struct EtcdVolumesTask;

impl Task for EtcdVolumesTask {
    type Actual = Actual;
    type Change = Change;

    fn recorded<'s>(&self, state: &'s ActualState) -> &'s Actual {
        &state.etcd_volumes
    }

    fn keep(&self, state: &mut ActualState, actual: Actual) {
        state.etcd_volumes = actual;
    }

    async fn find(&self, finder: &Finder<'_>, wanted: Wanted<'_>) -> Result<Actual, UpdateError> {
        find(finder.cloud, wanted.model).await
    }

    fn diff(
        &self,
        wanted: Wanted<'_>,
        _known: &Known,
        actual: &Actual,
    ) -> Result<Vec<Change>, UpdateError> {
        diff(&self::wanted(wanted.completed, wanted.model)?, actual)
    }

    async fn apply(
        &self,
        target: &Target<'_>,
        changes: &[Change],
        _known: &mut Known,
    ) -> Result<(), UpdateError> {
        apply(target, changes).await
    }

    fn render_terraform(
        &self,
        _wanted: Wanted<'_>,
        changes: &[Change],
        _known: &mut Known,
        terraform: &mut Terraform,
    ) -> Result<(), RenderError> {
        for change in changes {
            let want = match change {
                Change::Create(want) => want,
                Change::Modify { wanted, .. } | Change::Tag { wanted, .. } => {
                    return Err(RenderError::NotACreate {
                        resource: format!("EtcdVolume {}", wanted.name),
                        action: "an update",
                    })
                }
            };
            let mut volume = TfResource::new()
                .attr("availability_zone", want.zone.as_str())
                .attr("encrypted", want.encrypted);
            if let Some(iops) = want.iops {
                volume = volume.attr("iops", i64::from(iops));
            }
            if let Some(key) = &want.kms_key_id {
                volume = volume.attr("kms_key_id", key.as_str());
            }
            volume = volume
                .attr("size", i64::from(want.size_gib))
                .attr("tags", string_map(&want.tags));
            if let Some(throughput) = want.throughput {
                volume = volume.attr("throughput", i64::from(throughput));
            }
            volume = volume.attr("type", want.volume_type.as_str());
            terraform.resource("aws_ebs_volume", &tf_name(&want.name), volume)?;
        }
        Ok(())
    }
}
