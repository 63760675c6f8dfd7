//! A kops InstanceGroup document to Ballast's `InstanceGroup`.

use ballast_state::defaults::default_image;
use ballast_state::spec::{
    HttpTokens, InstanceGroup, InstanceGroupIamSpec, InstanceGroupSpec, InstanceMetadataSpec, Role,
    RootVolumeSpec,
};
use yaml_serde::Value;

use ballast_state::group_aws::{
    from_go_duration, ExternalLoadBalancer, MixedInstancesPolicySpec, SpotAllocationStrategy,
};

use super::cluster::{header, kubelet, KubeletOf, MappedCluster, NO_EQUIVALENT};
use super::walk::{Fields, Recorder};
use super::{Choices, FieldFate, KopsDocument};

/// Ballast's images are named `ballast-k8s-<minor>-debian-12` by its Packer template.
const BALLAST_IMAGE_PREFIX: &str = "ballast-k8s-";

pub fn map(
    document: &KopsDocument,
    cluster: &MappedCluster,
    choices: Choices,
    fates: &mut Vec<FieldFate>,
) -> Option<InstanceGroup> {
    let name = document
        .value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let object = if name.is_empty() {
        format!("InstanceGroup ({})", document.source)
    } else {
        format!("InstanceGroup/{name}")
    };
    let mut r = Recorder { object, fates };
    let mut top = r.fields("", document.value.clone())?;
    header(&mut r, &mut top, "InstanceGroup");
    let mut labels = std::collections::BTreeMap::new();
    if let Some(meta) = top.take("metadata") {
        if let Some(mut meta) = r.fields("metadata", meta) {
            if meta.take("name").is_some() {
                r.mapped("metadata.name", "metadata.name");
            } else {
                r.refused("metadata.name", "is missing: a group needs its name");
            }
            if meta.take("creationTimestamp").is_some() {
                r.dropped(
                    "metadata.creationTimestamp",
                    "when kops stored the object; Ballast's store records its own writes",
                );
            }
            if let Some(v) = meta.take("labels") {
                if let Some(map) = r.string_map("metadata.labels", v) {
                    for (key, value) in map {
                        let path = format!("metadata.labels.{key}");
                        if key == "kops.k8s.io/cluster" {
                            if value == cluster.name {
                                r.dropped(
                                    &path,
                                    "names the group's cluster; Ballast stores a group under its cluster",
                                );
                            } else {
                                r.refused(
                                    &path,
                                    format!(
                                        "{value:?}: the group belongs to another cluster than {:?}; import each \
                                         cluster with its own groups",
                                        cluster.name
                                    ),
                                );
                            }
                        } else {
                            r.mapped(&path, &path);
                            labels.insert(key, value);
                        }
                    }
                }
            }
            r.finish(meta, NO_EQUIVALENT);
        }
    }
    let mut spec = InstanceGroupSpec::with_role(Role::Node);
    let mut role_ok = false;
    match top.take("spec") {
        Some(v) => {
            if let Some(fields) = r.fields("spec", v) {
                role_ok = spec_fields(&mut r, fields, cluster, choices, &mut spec);
            }
        }
        None => r.refused("spec", "is missing"),
    }
    r.finish(top, NO_EQUIVALENT);
    if !role_ok {
        return None;
    }
    let mut group = InstanceGroup::new(&name, spec);
    group.metadata.labels = labels;
    Some(group)
}

/// Returns whether the role was mapped.
fn spec_fields(
    r: &mut Recorder<'_>,
    mut f: Fields,
    cluster: &MappedCluster,
    choices: Choices,
    spec: &mut InstanceGroupSpec,
) -> bool {
    let role_ok = match f.take("role").map(|v| r.string("spec.role", v)) {
        Some(Some(role)) => match role.as_str() {
            "Master" | "ControlPlane" => {
                r.mapped("spec.role", "spec.role: ControlPlane");
                spec.role = Role::ControlPlane;
                true
            }
            "Node" => {
                r.mapped("spec.role", "spec.role: Node");
                true
            }
            "Bastion" => {
                r.mapped("spec.role", "spec.role: Bastion");
                spec.role = Role::Bastion;
                true
            }
            "APIServer" => {
                r.mapped("spec.role", "spec.role: ApiServer");
                spec.role = Role::ApiServer;
                true
            }
            other => {
                r.refused(
                    "spec.role",
                    format!("{other:?}: use Master, ControlPlane, Node, APIServer or Bastion"),
                );
                false
            }
        },
        Some(None) => false,
        None => {
            r.refused("spec.role", "is missing");
            false
        }
    };
    if let Some(v) = f.take("machineType") {
        if let Some(t) = r.string("spec.machineType", v) {
            if t.contains(',') {
                r.refused(
                    "spec.machineType",
                    format!("{t:?}: Ballast's groups have one instance type"),
                );
            } else {
                r.mapped("spec.machineType", "spec.machineType");
                spec.machine_type = Some(t);
            }
        }
    }
    for field in ["minSize", "maxSize"] {
        if let Some(v) = f.take(field) {
            let path = format!("spec.{field}");
            if let Some(n) = r.number(&path, v) {
                r.mapped(&path, &path);
                if field == "minSize" {
                    spec.min_size = Some(n);
                } else {
                    spec.max_size = Some(n);
                }
            }
        }
    }
    let mut public = false;
    if let Some(v) = f.take("subnets") {
        if let Some(subnets) = r.strings("spec.subnets", v) {
            r.mapped("spec.subnets", "spec.subnets");
            public = subnets
                .iter()
                .any(|s| cluster.subnet_public.get(s).copied().unwrap_or(false));
            spec.subnets = subnets;
        }
    }
    image(r, f.take("image"), cluster, choices);
    public_ip(r, f.take("associatePublicIp"), public, choices, spec);
    aws_settings(r, &mut f, spec);
    root_volume(r, &mut f, spec);
    extra_volumes(r, &mut f, spec);
    if let Some(v) = f.take("instanceMetadata") {
        if let Some(mut m) = r.fields("spec.instanceMetadata", v) {
            let mut out = InstanceMetadataSpec::default();
            if let Some(v) = m.take("httpTokens") {
                match r.string("spec.instanceMetadata.httpTokens", v).as_deref() {
                    Some("required") => {
                        r.mapped(
                            "spec.instanceMetadata.httpTokens",
                            "spec.instanceMetadata.httpTokens: required",
                        );
                        out.http_tokens = Some(HttpTokens::Required);
                    }
                    Some("optional") => {
                        r.mapped(
                            "spec.instanceMetadata.httpTokens",
                            "spec.instanceMetadata.httpTokens: optional",
                        );
                        out.http_tokens = Some(HttpTokens::Optional);
                    }
                    Some(other) => r.refused(
                        "spec.instanceMetadata.httpTokens",
                        format!("{other:?}: use required or optional"),
                    ),
                    None => {}
                }
            }
            if let Some(v) = m.take("httpPutResponseHopLimit") {
                if let Some(n) = r.number("spec.instanceMetadata.httpPutResponseHopLimit", v) {
                    r.mapped(
                        "spec.instanceMetadata.httpPutResponseHopLimit",
                        "spec.instanceMetadata.httpPutResponseHopLimit",
                    );
                    out.http_put_response_hop_limit = Some(n);
                }
            }
            r.finish(m, NO_EQUIVALENT);
            spec.instance_metadata = Some(out);
        }
    }
    if let Some(v) = f.take("iam") {
        if let Some(mut iam) = r.fields("spec.iam", v) {
            if let Some(p) = iam.take("profile") {
                if let Some(profile) = r.string("spec.iam.profile", p) {
                    r.mapped(
                        "spec.iam.profile",
                        "spec.iam.profile (shared: never modified or deleted)",
                    );
                    spec.iam = Some(InstanceGroupIamSpec {
                        profile: Some(profile),
                    });
                }
            }
            r.finish(iam, NO_EQUIVALENT);
        }
    }
    if let Some(v) = f.take("nodeLabels") {
        if let Some(labels) = r.string_map("spec.nodeLabels", v) {
            r.mapped("spec.nodeLabels", "spec.nodeLabels");
            spec.node_labels = labels;
        }
    }
    if let Some(v) = f.take("taints") {
        if let Some(taints) = r.strings("spec.taints", v) {
            r.mapped("spec.taints", "spec.taints");
            spec.taints = Some(taints);
        }
    }
    if let Some(v) = f.take("autoscale") {
        if let Some(b) = r.boolean("spec.autoscale", v) {
            if !ballast_state::autoscaler::enabled(&cluster.spec) {
                r.dropped(
                    "spec.autoscale",
                    "the cluster's autoscaler is not enabled, so nothing sizes the group in kops either",
                );
            } else if spec.role != Role::Node {
                r.dropped(
                    "spec.autoscale",
                    "only node groups are autoscaled, in kops as in Ballast",
                );
            } else {
                r.mapped("spec.autoscale", "spec.autoscale");
                spec.autoscale = Some(b);
            }
        }
    }
    if let Some(v) = f.take("autoscalePriority") {
        if let Some(n) = r.number("spec.autoscalePriority", v) {
            let priority_expander = cluster
                .spec
                .cluster_autoscaler
                .as_ref()
                .and_then(|c| c.expander)
                == Some(ballast_state::spec::AutoscalerExpander::Priority);
            if !ballast_state::autoscaler::enabled(&cluster.spec) || !priority_expander {
                r.dropped(
                    "spec.autoscalePriority",
                    "only the priority expander reads it, and this cluster's autoscaler does not use it",
                );
            } else if spec.role != Role::Node || spec.autoscale == Some(false) {
                r.dropped(
                    "spec.autoscalePriority",
                    "the group is not autoscaled, so no tier lists it, in kops as in Ballast",
                );
            } else {
                r.mapped("spec.autoscalePriority", "spec.autoscalePriority");
                spec.autoscale_priority = Some(n);
            }
        }
    }
    if let Some(v) = f.take("cloudLabels") {
        if let Some(labels) = r.string_map("spec.cloudLabels", v) {
            r.mapped("spec.cloudLabels", "spec.cloudLabels");
            spec.cloud_labels = labels;
        }
    }
    if let Some(v) = f.take("kubelet") {
        kubelet(r, "spec.kubelet", v, KubeletOf::Group);
    }
    // After the role and sizes: a control-plane group's pace is judged by how many instances it may have.
    let most = spec.max_size.or(spec.min_size).unwrap_or(1);
    spec.rolling_update = super::rolling_update::group(
        r,
        f.take("rollingUpdate"),
        spec.role,
        most,
        &cluster.rolling_update,
    );
    r.finish(f, NO_EQUIVALENT);
    role_ok
}

fn image(r: &mut Recorder<'_>, v: Option<Value>, cluster: &MappedCluster, choices: Choices) {
    let Some(v) = v else {
        return;
    };
    let Some(image) = r.string("spec.image", v) else {
        return;
    };
    let version = cluster.spec.kubernetes_version.clone().unwrap_or_default();
    let ballast = default_image(&version);
    if image.starts_with(BALLAST_IMAGE_PREFIX) {
        r.mapped("spec.image", "spec.image");
    } else if choices.ballast_images {
        r.replaced(
            "spec.image",
            format!("{ballast} (--ballast-images: Ballast's image for the cluster's version, in place of {image})"),
        );
    } else {
        r.refused(
            "spec.image",
            format!(
                "{image:?} is not a Ballast image: Ballast's nodes boot from its own AMI, with nodeup and the \
                 pinned components baked in (images/README.md). Import with --ballast-images to use {ballast}, \
                 or name a Ballast image"
            ),
        );
    }
}

/// kops's mixed instances policy, spot price, scale-in protection, lifetime, extra security groups and external
/// load balancers: each to the Ballast field of the same name (`ballast_state::group_aws`).
fn aws_settings(r: &mut Recorder<'_>, f: &mut Fields, spec: &mut InstanceGroupSpec) {
    if let Some(v) = f.take("mixedInstancesPolicy") {
        let path = "spec.mixedInstancesPolicy";
        if let Some(mut m) = r.fields(path, v) {
            let mut out = MixedInstancesPolicySpec::default();
            if let Some(v) = m.take("instances") {
                if let Some(types) = r.strings(&format!("{path}.instances"), v) {
                    r.mapped(
                        &format!("{path}.instances"),
                        "spec.mixedInstancesPolicy.instances",
                    );
                    out.instances = types;
                }
            }
            for field in ["onDemandBase", "onDemandAboveBase", "spotInstancePools"] {
                if let Some(v) = m.take(field) {
                    let at = format!("{path}.{field}");
                    if let Some(n) = r.number(&at, v) {
                        r.mapped(&at, &at);
                        match field {
                            "onDemandBase" => out.on_demand_base = Some(n),
                            "onDemandAboveBase" => out.on_demand_above_base = Some(n),
                            _ => out.spot_instance_pools = Some(n),
                        }
                    }
                }
            }
            if let Some(v) = m.take("spotAllocationStrategy") {
                let at = format!("{path}.spotAllocationStrategy");
                if let Some(text) = r.string(&at, v) {
                    match SpotAllocationStrategy::parse(&text) {
                        Some(s) => {
                            r.mapped(&at, &at);
                            out.spot_allocation_strategy = Some(s);
                        }
                        None => r.refused(
                            &at,
                            format!(
                                "{text:?}: use lowest-price, capacity-optimized, capacity-optimized-prioritized \
                                 or price-capacity-optimized"
                            ),
                        ),
                    }
                }
            }
            r.finish(m, NO_EQUIVALENT);
            spec.mixed_instances_policy = Some(out);
        }
    }
    if let Some(v) = f.take("maxPrice") {
        if let Some(price) = r.string("spec.maxPrice", v) {
            r.mapped("spec.maxPrice", "spec.maxPrice");
            spec.max_price = Some(price);
        }
    }
    if let Some(v) = f.take("instanceProtection") {
        if let Some(b) = r.boolean("spec.instanceProtection", v) {
            r.mapped("spec.instanceProtection", "spec.instanceProtection");
            spec.instance_protection = Some(b);
        }
    }
    if let Some(v) = f.take("maxInstanceLifetime") {
        let path = "spec.maxInstanceLifetime";
        if let Some(text) = r.string(path, v) {
            match from_go_duration(&text) {
                Some(ours) => {
                    r.mapped(path, format!("spec.maxInstanceLifetime: {ours}"));
                    spec.max_instance_lifetime = Some(ours);
                }
                None => r.refused(
                    path,
                    format!("{text:?} is not whole hours, minutes and seconds (e.g. 48h20m)"),
                ),
            }
        }
    }
    if let Some(v) = f.take("additionalSecurityGroups") {
        if let Some(groups) = r.strings("spec.additionalSecurityGroups", v) {
            r.mapped(
                "spec.additionalSecurityGroups",
                "spec.additionalSecurityGroups",
            );
            spec.additional_security_groups = groups;
        }
    }
    if let Some(v) = f.take("externalLoadBalancers") {
        let path = "spec.externalLoadBalancers";
        let Value::Sequence(items) = v else {
            r.refused(path, "is not a list");
            return;
        };
        for (i, item) in items.into_iter().enumerate() {
            let at = format!("{path}[{i}]");
            let Some(mut lb) = r.fields(&at, item) else {
                continue;
            };
            let mut out = ExternalLoadBalancer::default();
            if let Some(v) = lb.take("loadBalancerName") {
                out.load_balancer_name = r.string(&format!("{at}.loadBalancerName"), v);
            }
            if let Some(v) = lb.take("targetGroupArn") {
                out.target_group_arn = r.string(&format!("{at}.targetGroupArn"), v);
            }
            r.finish(lb, NO_EQUIVALENT);
            r.mapped(&at, format!("{at} (attached, never deleted by Ballast)"));
            spec.external_load_balancers.push(out);
        }
    }
}

fn public_ip(
    r: &mut Recorder<'_>,
    v: Option<Value>,
    public: bool,
    choices: Choices,
    spec: &mut InstanceGroupSpec,
) {
    let path = "spec.associatePublicIp";
    let value = match v {
        Some(v) => match r.boolean(path, v) {
            Some(b) => Some(b),
            None => return,
        },
        None => None,
    };
    match (value, public) {
        (Some(false), _) => {
            r.mapped(path, path);
            spec.associate_public_ip = Some(false);
        }
        (Some(true), false) => r.dropped(
            path,
            "the group's subnets are private, where instances get no public IP (kops's own Terraform sets \
             associate_public_ip_address = false there)",
        ),
        (_, true) if choices.no_public_ips => {
            r.replaced(
                path,
                "spec.associatePublicIp: false (--no-public-ips), where kops gives instances in public subnets \
                 public IPs (its default when the field is absent)",
            );
            spec.associate_public_ip = Some(false);
        }
        // Ballast's default is kops's: a public IP when every subnet of the group is public.
        (Some(true), true) => {
            r.mapped(path, path);
            spec.associate_public_ip = Some(true);
        }
        (None, _) => {}
    }
}

/// kops's `volumes` and `volumeMounts` map field for field (Ballast keeps kops's shape); validation then holds
/// them to Ballast's rules (device names, encryption, mount paths: docs/spec.md).
fn extra_volumes(r: &mut Recorder<'_>, f: &mut Fields, spec: &mut InstanceGroupSpec) {
    if let Some(v) = f.take("volumes") {
        let path = "spec.volumes";
        match v {
            Value::Sequence(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    let at = format!("{path}[{i}]");
                    let Some(mut fields) = r.fields(&at, item) else {
                        continue;
                    };
                    let mut out = ballast_state::spec::VolumeSpec::default();
                    let text = |r: &mut Recorder<'_>, fields: &mut Fields, key: &str| {
                        fields
                            .take(key)
                            .and_then(|v| r.string(&format!("{at}.{key}"), v))
                    };
                    out.device = text(r, &mut fields, "device").unwrap_or_default();
                    out.volume_type = text(r, &mut fields, "type");
                    out.key = text(r, &mut fields, "key");
                    let number = |r: &mut Recorder<'_>, fields: &mut Fields, key: &str| {
                        fields
                            .take(key)
                            .and_then(|v| r.number(&format!("{at}.{key}"), v))
                    };
                    out.size = number(r, &mut fields, "size");
                    out.iops = number(r, &mut fields, "iops");
                    out.throughput = number(r, &mut fields, "throughput");
                    let flag = |r: &mut Recorder<'_>, fields: &mut Fields, key: &str| {
                        fields
                            .take(key)
                            .and_then(|v| r.boolean(&format!("{at}.{key}"), v))
                    };
                    out.encrypted = flag(r, &mut fields, "encrypted");
                    out.delete_on_termination = flag(r, &mut fields, "deleteOnTermination");
                    r.finish(fields, NO_EQUIVALENT);
                    r.mapped(&at, at.clone());
                    spec.volumes.push(out);
                }
            }
            _ => r.refused(path, "is not a list"),
        }
    }
    if let Some(v) = f.take("volumeMounts") {
        let path = "spec.volumeMounts";
        match v {
            Value::Sequence(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    let at = format!("{path}[{i}]");
                    let Some(mut fields) = r.fields(&at, item) else {
                        continue;
                    };
                    let mut out = ballast_state::spec::VolumeMountSpec::default();
                    let mut text = |key: &str| {
                        fields
                            .take(key)
                            .and_then(|v| r.string(&format!("{at}.{key}"), v))
                    };
                    out.device = text("device").unwrap_or_default();
                    out.path = text("path").unwrap_or_default();
                    out.filesystem = text("filesystem");
                    for (key, list) in [
                        ("formatOptions", &mut out.format_options),
                        ("mountOptions", &mut out.mount_options),
                    ] {
                        if let Some(v) = fields.take(key) {
                            *list = r.strings(&format!("{at}.{key}"), v).unwrap_or_default();
                        }
                    }
                    r.finish(fields, NO_EQUIVALENT);
                    r.mapped(&at, at.clone());
                    spec.volume_mounts.push(out);
                }
            }
            _ => r.refused(path, "is not a list"),
        }
    }
}

fn root_volume(r: &mut Recorder<'_>, f: &mut Fields, spec: &mut InstanceGroupSpec) {
    let mut out = RootVolumeSpec::default();
    if let Some(v) = f.take("rootVolumeSize") {
        if let Some(n) = r.number("spec.rootVolumeSize", v) {
            r.mapped("spec.rootVolumeSize", "spec.rootVolume.size");
            out.size = Some(n);
        }
    }
    if let Some(v) = f.take("rootVolumeType") {
        if let Some(t) = r.string("spec.rootVolumeType", v) {
            r.mapped("spec.rootVolumeType", "spec.rootVolume.type");
            out.volume_type = Some(t);
        }
    }
    if let Some(v) = f.take("rootVolumeEncryption") {
        if let Some(b) = r.boolean("spec.rootVolumeEncryption", v) {
            r.mapped("spec.rootVolumeEncryption", "spec.rootVolume.encrypted");
            out.encrypted = Some(b);
        }
    }
    if let Some(v) = f.take("rootVolumeEncryptionKey") {
        if let Some(k) = r.string("spec.rootVolumeEncryptionKey", v) {
            r.mapped("spec.rootVolumeEncryptionKey", "spec.rootVolume.kmsKeyId");
            out.kms_key_id = Some(k);
        }
    }
    if let Some(v) = f.take("rootVolumeIops") {
        if let Some(n) = r.number("spec.rootVolumeIops", v) {
            r.mapped("spec.rootVolumeIops", "spec.rootVolume.iops");
            out.iops = Some(n);
        }
    }
    if let Some(v) = f.take("rootVolumeThroughput") {
        if let Some(n) = r.number("spec.rootVolumeThroughput", v) {
            r.mapped("spec.rootVolumeThroughput", "spec.rootVolume.throughput");
            out.throughput = Some(n);
        }
    }
    if out != RootVolumeSpec::default() {
        spec.root_volume = Some(out);
    }
}
