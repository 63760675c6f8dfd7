//! The cluster autoscaler's pure rules (`spec.clusterAutoscaler`, an instance group's `autoscale` and
//! `autoscalePriority`; the types are in `spec`): which groups it may size, the Auto Scaling group tags it finds
//! them by and reads their node template from, kops's defaults, the spec's rules, and what the control-plane node
//! spec tells nodeup's add-on (`nodeup/src/addons/cluster_autoscaler.rs`). docs/addons.md is the reference.
//!
//! Discovery is by tags, not by a list of groups in the Deployment's flags (kops's `--nodes=min:max:name`): the
//! autoscaler reads each group's bounds from its Auto Scaling group, so a resize or a new group changes tags, not
//! the control plane's node spec, and rolls nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::duration::parse_duration;
use crate::error::FieldError;
use crate::limits::{
    AUTOSCALER_DURATION_SECS, AWS_MAX_TAGS_PER_RESOURCE, BALLAST_TAGS_PER_RESOURCE,
    MAX_AUTOSCALE_PRIORITY,
};
use crate::spec::{
    AutoscalerExpander, ClusterAutoscalerSpec, ClusterConfig, ClusterSpec, InstanceGroup, Role,
    KIND_CLUSTER, KIND_INSTANCE_GROUP,
};

/// Every tag the autoscaler reads starts with this.
pub const TAG_PREFIX: &str = "k8s.io/cluster-autoscaler/";
/// The first of the two tags `--node-group-auto-discovery` looks for.
pub const ENABLED_TAG: &str = "k8s.io/cluster-autoscaler/enabled";
/// A node-template label tag: `<prefix><label>` = the label's value (what a node of an empty group would carry).
pub const NODE_TEMPLATE_LABEL_PREFIX: &str = "k8s.io/cluster-autoscaler/node-template/label/";
/// A node-template taint tag: `<prefix><key>` = `value:Effect`.
pub const NODE_TEMPLATE_TAINT_PREFIX: &str = "k8s.io/cluster-autoscaler/node-template/taint/";
/// The add-on's service account (`kube-system`).
pub const SERVICE_ACCOUNT: &str = "cluster-autoscaler";
/// The priority expander's ConfigMap (its name is fixed by the autoscaler).
pub const PRIORITY_CONFIG_MAP: &str = "cluster-autoscaler-priority-expander";

/// kops's defaults (`pkg/model/components/clusterautoscaler.go`).
pub const DEFAULT_EXPANDER: AutoscalerExpander = AutoscalerExpander::Random;
pub const DEFAULT_SCALE_DOWN_DELAY_AFTER_ADD: &str = "10m";
pub const DEFAULT_SCALE_DOWN_UNNEEDED_TIME: &str = "10m";
pub const DEFAULT_MAX_NODE_PROVISION_TIME: &str = "15m";

/// The second discovery tag: the cluster's own, so one account's autoscalers never size each other's groups.
pub fn cluster_tag(cluster: &str) -> String {
    format!("{TAG_PREFIX}{cluster}")
}

/// Whether the spec turns the autoscaler on.
pub fn enabled(spec: &ClusterSpec) -> bool {
    spec.cluster_autoscaler
        .as_ref()
        .and_then(|c| c.enabled)
        .unwrap_or(false)
}

/// Whether the autoscaler may size this group: it is on, the group is a node group, and `autoscale` is not false.
pub fn autoscales(spec: &ClusterSpec, ig: &InstanceGroup) -> bool {
    enabled(spec) && ig.spec.role == Role::Node && ig.spec.autoscale != Some(false)
}

/// Fills kops's defaults into an enabled `spec.clusterAutoscaler` (completion); a disabled one is left as written.
pub fn complete(spec: &mut ClusterSpec) {
    let Some(ca) = spec.cluster_autoscaler.as_mut() else {
        return;
    };
    if ca.enabled != Some(true) {
        return;
    }
    ca.expander.get_or_insert(DEFAULT_EXPANDER);
    ca.balance_similar_node_groups.get_or_insert(false);
    ca.skip_nodes_with_local_storage.get_or_insert(true);
    ca.skip_nodes_with_system_pods.get_or_insert(true);
    ca.scale_down_delay_after_add
        .get_or_insert_with(|| DEFAULT_SCALE_DOWN_DELAY_AFTER_ADD.to_string());
    ca.scale_down_unneeded_time
        .get_or_insert_with(|| DEFAULT_SCALE_DOWN_UNNEEDED_TIME.to_string());
    ca.max_node_provision_time
        .get_or_insert_with(|| DEFAULT_MAX_NODE_PROVISION_TIME.to_string());
}

/// The Auto Scaling group tags of a completed group for the autoscaler: none unless it [`autoscales`]; else the
/// two discovery tags, and a node-template tag per label and taint its nodes register with (so a group at zero
/// can still be chosen for a pod that needs them), as kops renders them.
pub fn asg_tags(cluster: &str, spec: &ClusterSpec, ig: &InstanceGroup) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::new();
    if !autoscales(spec, ig) {
        return tags;
    }
    tags.insert(ENABLED_TAG.to_string(), "true".to_string());
    tags.insert(cluster_tag(cluster), "owned".to_string());
    for (key, value) in &ig.spec.node_labels {
        tags.insert(format!("{NODE_TEMPLATE_LABEL_PREFIX}{key}"), value.clone());
    }
    for taint in ig.spec.taints.iter().flatten() {
        if let Some((key, value)) = taint_tag(taint) {
            tags.insert(format!("{NODE_TEMPLATE_TAINT_PREFIX}{key}"), value);
        }
    }
    tags
}

/// `key[=value]:Effect` as the node-template tag's key and value (`value:Effect`); `None` for a malformed taint,
/// which validation refuses.
fn taint_tag(taint: &str) -> Option<(String, String)> {
    let (key_value, effect) = taint.rsplit_once(':')?;
    let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
    Some((key.to_string(), format!("{value}:{effect}")))
}

/// What nodeup's add-on is configured with, in the control-plane node spec: present exactly when the autoscaler
/// is on. A change of it changes the control plane's node spec, so `rolling-update` replaces the control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterAutoscalerSettings {
    /// `AWS_REGION` of the container.
    pub region: String,
    pub expander: AutoscalerExpander,
    pub balance_similar_node_groups: bool,
    pub skip_nodes_with_local_storage: bool,
    pub skip_nodes_with_system_pods: bool,
    pub scale_down_delay_after_add: String,
    pub scale_down_unneeded_time: String,
    pub max_node_provision_time: String,
    /// The priority expander's tiers, highest first (expander `priority` only): each autoscaled group's Auto
    /// Scaling group name under its `autoscalePriority` (0 when unset, as kops).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priorities: Vec<PriorityTier>,
}

/// One tier of the priority expander.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorityTier {
    pub priority: u32,
    /// Auto Scaling group names (`<group>.<cluster>`), sorted.
    pub groups: Vec<String>,
}

/// The settings of a completed config, `None` when the autoscaler is off.
pub fn settings(completed: &ClusterConfig) -> Option<ClusterAutoscalerSettings> {
    let spec = &completed.cluster.spec;
    if !enabled(spec) {
        return None;
    }
    let ca = spec.cluster_autoscaler.clone().unwrap_or_default();
    let expander = ca.expander.unwrap_or(DEFAULT_EXPANDER);
    let mut tiers: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    if expander == AutoscalerExpander::Priority {
        for ig in completed
            .instance_groups
            .iter()
            .filter(|ig| autoscales(spec, ig))
        {
            tiers
                .entry(ig.spec.autoscale_priority.unwrap_or(0))
                .or_default()
                .push(format!("{}.{}", ig.metadata.name, completed.name()));
        }
    }
    Some(ClusterAutoscalerSettings {
        region: spec.region.clone().unwrap_or_default(),
        expander,
        balance_similar_node_groups: ca.balance_similar_node_groups.unwrap_or(false),
        skip_nodes_with_local_storage: ca.skip_nodes_with_local_storage.unwrap_or(true),
        skip_nodes_with_system_pods: ca.skip_nodes_with_system_pods.unwrap_or(true),
        scale_down_delay_after_add: ca
            .scale_down_delay_after_add
            .unwrap_or_else(|| DEFAULT_SCALE_DOWN_DELAY_AFTER_ADD.to_string()),
        scale_down_unneeded_time: ca
            .scale_down_unneeded_time
            .unwrap_or_else(|| DEFAULT_SCALE_DOWN_UNNEEDED_TIME.to_string()),
        max_node_provision_time: ca
            .max_node_provision_time
            .unwrap_or_else(|| DEFAULT_MAX_NODE_PROVISION_TIME.to_string()),
        priorities: tiers
            .into_iter()
            .rev()
            .map(|(priority, mut groups)| {
                groups.sort();
                PriorityTier { priority, groups }
            })
            .collect(),
    })
}

/// The spec's rules: every option only with the autoscaler on, each duration in the grammar and within
/// [`AUTOSCALER_DURATION_SECS`]; `autoscale` and `autoscalePriority` on node groups only, only with the
/// autoscaler on (and the priority with the priority expander), the priority within [`MAX_AUTOSCALE_PRIORITY`];
/// the node-template tags within AWS's tags per resource.
pub fn check(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    let spec = &config.cluster.spec;
    let cluster_object = format!("{KIND_CLUSTER}/{}", config.name());
    let on = enabled(spec);
    if let Some(ca) = &spec.cluster_autoscaler {
        check_options(errors, &cluster_object, ca, on);
    }
    let expander = spec
        .cluster_autoscaler
        .as_ref()
        .and_then(|c| c.expander)
        .unwrap_or(DEFAULT_EXPANDER);
    for ig in &config.instance_groups {
        let object = format!("{KIND_INSTANCE_GROUP}/{}", ig.metadata.name);
        let mut error = |path: &str, message: String| {
            errors.push(FieldError::new(&object, path, message));
        };
        let fields = [
            ("spec.autoscale", ig.spec.autoscale.is_some()),
            (
                "spec.autoscalePriority",
                ig.spec.autoscale_priority.is_some(),
            ),
        ];
        for (path, set) in fields {
            if !set {
                continue;
            }
            if ig.spec.role != Role::Node {
                error(
                    path,
                    format!(
                        "only node groups are autoscaled, and this group's role is {:?}: remove it",
                        ig.spec.role
                    ),
                );
            } else if !on {
                error(
                    path,
                    "takes effect only with the cluster autoscaler: set the cluster's spec.clusterAutoscaler.enabled \
                     to true, or remove it"
                        .to_string(),
                );
            }
        }
        if let Some(priority) = ig.spec.autoscale_priority {
            if on && ig.spec.role == Role::Node {
                if expander != AutoscalerExpander::Priority {
                    error(
                        "spec.autoscalePriority",
                        format!(
                            "is read by the priority expander only, and the cluster's spec.clusterAutoscaler.expander \
                             is {}: set expander: priority, or remove it",
                            expander.flag_value()
                        ),
                    );
                } else if ig.spec.autoscale == Some(false) {
                    error(
                        "spec.autoscalePriority",
                        "the group does not autoscale (autoscale: false): remove one of them"
                            .to_string(),
                    );
                }
            }
            if priority > MAX_AUTOSCALE_PRIORITY {
                error(
                    "spec.autoscalePriority",
                    format!("{priority} is more than {MAX_AUTOSCALE_PRIORITY}"),
                );
            }
        }
        let autoscaler_tags = asg_tags(config.name(), spec, ig).len();
        // The cluster's and the group's cloud labels together (as `defaults::merged_cloud_labels` merges them;
        // not called, so that completion may use this module without an import circle).
        let cloud_labels = spec
            .cloud_labels
            .keys()
            .chain(ig.spec.cloud_labels.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let total = autoscaler_tags + cloud_labels + BALLAST_TAGS_PER_RESOURCE;
        if autoscaler_tags > 0 && total > AWS_MAX_TAGS_PER_RESOURCE {
            error(
                "spec.nodeLabels",
                format!(
                    "its {autoscaler_tags} cluster autoscaler tags (two for discovery, one per node label and taint), \
                     {cloud_labels} cloud labels and Ballast's {BALLAST_TAGS_PER_RESOURCE} make {total} tags on its \
                     Auto Scaling group, more than AWS's {AWS_MAX_TAGS_PER_RESOURCE}: use fewer labels, taints or \
                     cloud labels, or set autoscale: false"
                ),
            );
        }
    }
}

fn check_options(errors: &mut Vec<FieldError>, object: &str, ca: &ClusterAutoscalerSpec, on: bool) {
    let mut error =
        |path: &str, message: String| errors.push(FieldError::new(object, path, message));
    let set: [(&str, bool); 7] = [
        ("expander", ca.expander.is_some()),
        (
            "balanceSimilarNodeGroups",
            ca.balance_similar_node_groups.is_some(),
        ),
        (
            "skipNodesWithLocalStorage",
            ca.skip_nodes_with_local_storage.is_some(),
        ),
        (
            "skipNodesWithSystemPods",
            ca.skip_nodes_with_system_pods.is_some(),
        ),
        (
            "scaleDownDelayAfterAdd",
            ca.scale_down_delay_after_add.is_some(),
        ),
        (
            "scaleDownUnneededTime",
            ca.scale_down_unneeded_time.is_some(),
        ),
        ("maxNodeProvisionTime", ca.max_node_provision_time.is_some()),
    ];
    if !on {
        for (field, _) in set.iter().filter(|(_, set)| *set) {
            error(
                &format!("spec.clusterAutoscaler.{field}"),
                "takes effect only with the autoscaler on: set spec.clusterAutoscaler.enabled to true, or remove it"
                    .to_string(),
            );
        }
    }
    let durations = [
        ("scaleDownDelayAfterAdd", &ca.scale_down_delay_after_add),
        ("scaleDownUnneededTime", &ca.scale_down_unneeded_time),
        ("maxNodeProvisionTime", &ca.max_node_provision_time),
    ];
    for (field, value) in durations {
        let Some(value) = value else { continue };
        let path = format!("spec.clusterAutoscaler.{field}");
        match parse_duration(value) {
            Ok(d) if AUTOSCALER_DURATION_SECS.contains(&d.as_secs()) => {}
            Ok(d) => error(
                &path,
                format!(
                    "{value:?} is {} s, outside {}s..{}s",
                    d.as_secs(),
                    AUTOSCALER_DURATION_SECS.start(),
                    AUTOSCALER_DURATION_SECS.end()
                ),
            ),
            Err(e) => error(&path, format!("{e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::complete as complete_config;
    use crate::generate::{generate, ClusterTemplate};
    use crate::spec::InstanceGroupSpec;

    fn cluster(ca: Option<ClusterAutoscalerSpec>) -> ClusterConfig {
        let mut config = generate(&ClusterTemplate {
            name: "demo.example.com".into(),
            zones: vec!["us-west-2a".into()],
            ..Default::default()
        })
        .expect("template");
        config.cluster.spec.cluster_autoscaler = ca;
        config
    }

    fn on(expander: AutoscalerExpander) -> Option<ClusterAutoscalerSpec> {
        Some(ClusterAutoscalerSpec {
            enabled: Some(true),
            expander: Some(expander),
            ..Default::default()
        })
    }

    fn index_of(config: &ClusterConfig, role: Role) -> usize {
        config
            .instance_groups
            .iter()
            .position(|ig| ig.spec.role == role)
            .expect("a group of the role")
    }

    fn node_group(config: &mut ClusterConfig) -> &mut InstanceGroupSpec {
        &mut config
            .instance_groups
            .iter_mut()
            .find(|ig| ig.spec.role == Role::Node)
            .expect("a node group")
            .spec
    }

    fn messages(config: &ClusterConfig) -> Vec<String> {
        let mut errors = Vec::new();
        check(&mut errors, &complete_config(config));
        errors
            .iter()
            .map(|e| format!("{} {}", e.object, e.path))
            .collect()
    }

    #[test]
    fn an_autoscaled_group_is_tagged_for_discovery_and_its_node_template() {
        let mut config = cluster(on(AutoscalerExpander::Random));
        let group = node_group(&mut config);
        group.node_labels.insert("team".into(), "blue".into());
        group.taints = Some(vec![
            "dedicated=gpu:NoSchedule".into(),
            "spot:PreferNoSchedule".into(),
        ]);
        let completed = complete_config(&config);
        let ig = completed
            .instance_groups
            .iter()
            .find(|ig| ig.spec.role == Role::Node)
            .expect("node group");
        let tags = asg_tags("demo.example.com", &completed.cluster.spec, ig);
        assert_eq!(tags[ENABLED_TAG], "true");
        assert_eq!(tags["k8s.io/cluster-autoscaler/demo.example.com"], "owned");
        assert_eq!(
            tags["k8s.io/cluster-autoscaler/node-template/label/team"],
            "blue"
        );
        assert_eq!(
            tags["k8s.io/cluster-autoscaler/node-template/label/ballast.dev/instance-group"],
            ig.metadata.name
        );
        assert_eq!(
            tags["k8s.io/cluster-autoscaler/node-template/taint/dedicated"],
            "gpu:NoSchedule"
        );
        assert_eq!(
            tags["k8s.io/cluster-autoscaler/node-template/taint/spot"],
            ":PreferNoSchedule"
        );
        // The control plane is never autoscaled.
        let control_plane = completed
            .instance_groups
            .iter()
            .find(|ig| ig.spec.role == Role::ControlPlane)
            .expect("control plane");
        assert!(asg_tags("demo.example.com", &completed.cluster.spec, control_plane).is_empty());
    }

    #[test]
    fn autoscale_false_or_the_autoscaler_off_leaves_no_tag() {
        let mut config = cluster(on(AutoscalerExpander::Random));
        node_group(&mut config).autoscale = Some(false);
        let completed = complete_config(&config);
        for ig in &completed.instance_groups {
            assert!(asg_tags("demo.example.com", &completed.cluster.spec, ig).is_empty());
        }
        let completed = complete_config(&cluster(None));
        for ig in &completed.instance_groups {
            assert!(asg_tags("demo.example.com", &completed.cluster.spec, ig).is_empty());
        }
        assert!(settings(&completed).is_none());
    }

    #[test]
    fn the_priority_expander_lists_each_autoscaled_group_under_its_priority_highest_first() {
        let mut config = cluster(on(AutoscalerExpander::Priority));
        let mut high = config.instance_groups[index_of(&config, Role::Node)].clone();
        high.metadata.name = "high".into();
        high.spec.autoscale_priority = Some(100);
        let mut off = config.instance_groups[index_of(&config, Role::Node)].clone();
        off.metadata.name = "fixed".into();
        off.spec.autoscale = Some(false);
        config.instance_groups.push(high);
        config.instance_groups.push(off);
        let settings = settings(&complete_config(&config)).expect("on");
        assert_eq!(settings.expander, AutoscalerExpander::Priority);
        let tiers: Vec<(u32, Vec<String>)> = settings
            .priorities
            .iter()
            .map(|t| (t.priority, t.groups.clone()))
            .collect();
        let node = &config.instance_groups[index_of(&config, Role::Node)]
            .metadata
            .name;
        assert_eq!(
            tiers,
            [
                (100, vec!["high.demo.example.com".to_string()]),
                (0, vec![format!("{node}.demo.example.com")]),
            ]
        );
        assert_eq!(settings.scale_down_unneeded_time, "10m");
        assert!(settings.skip_nodes_with_local_storage);
    }

    #[test]
    fn fields_that_would_not_take_effect_are_refused_by_path() {
        let mut config = cluster(Some(ClusterAutoscalerSpec {
            enabled: Some(false),
            expander: Some(AutoscalerExpander::LeastWaste),
            ..Default::default()
        }));
        node_group(&mut config).autoscale = Some(true);
        let refused = messages(&config);
        let node = &config.instance_groups[index_of(&config, Role::Node)]
            .metadata
            .name;
        assert_eq!(
            refused,
            [
                "Cluster/demo.example.com spec.clusterAutoscaler.expander".to_string(),
                format!("InstanceGroup/{node} spec.autoscale"),
            ]
        );

        let mut config = cluster(on(AutoscalerExpander::Random));
        node_group(&mut config).autoscale_priority = Some(10);
        let cp = index_of(&config, Role::ControlPlane);
        config.instance_groups[cp].spec.autoscale = Some(true);
        let control_plane = config.instance_groups[cp].metadata.name.clone();
        assert_eq!(
            messages(&config),
            [
                format!("InstanceGroup/{control_plane} spec.autoscale"),
                format!("InstanceGroup/{node} spec.autoscalePriority"),
            ]
        );
    }

    #[test]
    fn numbers_and_durations_are_bounded() {
        let mut config = cluster(Some(ClusterAutoscalerSpec {
            enabled: Some(true),
            expander: Some(AutoscalerExpander::Priority),
            scale_down_unneeded_time: Some("2d".into()),
            max_node_provision_time: Some("soon".into()),
            scale_down_delay_after_add: Some("10m0s".into()),
            ..Default::default()
        }));
        node_group(&mut config).autoscale_priority = Some(MAX_AUTOSCALE_PRIORITY + 1);
        let node = config.instance_groups[index_of(&config, Role::Node)]
            .metadata
            .name
            .clone();
        assert_eq!(
            messages(&config),
            [
                "Cluster/demo.example.com spec.clusterAutoscaler.scaleDownUnneededTime".to_string(),
                "Cluster/demo.example.com spec.clusterAutoscaler.maxNodeProvisionTime".to_string(),
                format!("InstanceGroup/{node} spec.autoscalePriority"),
            ]
        );
    }

    #[test]
    fn too_many_node_template_tags_are_refused() {
        let mut config = cluster(on(AutoscalerExpander::Random));
        let group = node_group(&mut config);
        for i in 0..45 {
            group.node_labels.insert(format!("l{i}"), "x".into());
        }
        let node = config.instance_groups[index_of(&config, Role::Node)]
            .metadata
            .name
            .clone();
        assert_eq!(
            messages(&config),
            [format!("InstanceGroup/{node} spec.nodeLabels")]
        );
    }
}
