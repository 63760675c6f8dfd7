//! The cluster autoscaler (pure), installed on the control plane when the node spec carries its settings
//! (`controlPlane.clusterAutoscaler`, written from `spec.clusterAutoscaler.enabled` by
//! `ballast_state::autoscaler::settings`). Typed k8s-openapi objects following kops's add-on
//! (`cluster-autoscaler.addons.k8s.io`) and upstream's chart for AWS:
//!
//! - a ServiceAccount, a ClusterRole (read what scheduling depends on, write events, evict pods, taint and
//!   update nodes it removes, its leader lease) and a Role in kube-system (its status ConfigMap and the priority
//!   expander's), each bound to the account;
//! - with the priority expander, the ConfigMap `cluster-autoscaler-priority-expander`: each tier's Auto Scaling
//!   groups as anchored, escaped regular expressions (the expander matches group names by regex, and a group name's
//!   dots would otherwise match any character, so `nodes.a.example.com` could also pick `nodes-a-example-com`);
//! - the Deployment, one replica on a control-plane node (system-cluster-critical): with IRSA off the
//!   control-plane instance role holds its Auto Scaling permissions (ctl/src/cloud/autoscaler.rs) and no worker's
//!   does; with IRSA on it runs on a role of its own (`addonRoles.clusterAutoscaler`).
//!
//! Every option of the settings is one flag ([`flags`]); groups are found by their tags
//! (`--node-group-auto-discovery`), never listed, so a resize or a new group changes no object here.

use std::collections::BTreeMap;

use ballast_state::autoscaler::{
    cluster_tag, ClusterAutoscalerSettings, PriorityTier, ENABLED_TAG, PRIORITY_CONFIG_MAP,
    SERVICE_ACCOUNT,
};
use ballast_state::node::NodeSpec;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, EnvVar, HTTPGetAction, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SecurityContext, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::objects::{
    cluster_role_ref, meta, requests, rule, service_account_subject, tolerate, CONTROL_PLANE_LABEL,
    KUBE_SYSTEM, RBAC_GROUP,
};

const NAME: &str = "cluster-autoscaler";
/// The ConfigMap the autoscaler writes its status to (its default name).
const STATUS_CONFIG_MAP: &str = "cluster-autoscaler-status";
/// Its metrics and health endpoint (`--address`'s default port).
const METRICS_PORT: i32 = 8085;

/// The autoscaler's objects.
pub struct ClusterAutoscaler {
    pub service_account: ServiceAccount,
    pub cluster_role: ClusterRole,
    pub role: Role,
    pub cluster_role_binding: ClusterRoleBinding,
    pub role_binding: RoleBinding,
    /// With the priority expander only.
    pub priority_config: Option<ConfigMap>,
    pub deployment: Deployment,
}

/// The objects for `spec` with `settings`, running `image` (a pinned `tag@sha256:...` reference).
pub fn cluster_autoscaler(
    spec: &NodeSpec,
    settings: &ClusterAutoscalerSettings,
    image: &str,
) -> ClusterAutoscaler {
    let subject = service_account_subject(SERVICE_ACCOUNT);
    ClusterAutoscaler {
        service_account: ServiceAccount {
            metadata: meta(SERVICE_ACCOUNT, Some(KUBE_SYSTEM), NAME),
            ..Default::default()
        },
        cluster_role: ClusterRole {
            metadata: meta(NAME, None, NAME),
            rules: Some(cluster_rules()),
            ..Default::default()
        },
        role: Role {
            metadata: meta(NAME, Some(KUBE_SYSTEM), NAME),
            rules: Some(vec![
                // It creates its status ConfigMap and watches the priority expander's.
                rule(&[""], &["configmaps"], &["create", "list", "watch"]),
                named_rule(
                    &[""],
                    &["configmaps"],
                    &[STATUS_CONFIG_MAP, PRIORITY_CONFIG_MAP],
                    &["delete", "get", "update", "watch"],
                ),
            ]),
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: meta(NAME, None, NAME),
            role_ref: cluster_role_ref(NAME),
            subjects: Some(vec![subject.clone()]),
        },
        role_binding: RoleBinding {
            metadata: meta(NAME, Some(KUBE_SYSTEM), NAME),
            role_ref: RoleRef {
                api_group: RBAC_GROUP.into(),
                kind: "Role".into(),
                name: NAME.into(),
            },
            subjects: Some(vec![subject]),
        },
        priority_config: (!settings.priorities.is_empty()).then(|| ConfigMap {
            metadata: meta(PRIORITY_CONFIG_MAP, Some(KUBE_SYSTEM), NAME),
            data: Some(BTreeMap::from([(
                "priorities".to_string(),
                priorities_yaml(&settings.priorities),
            )])),
            ..Default::default()
        }),
        deployment: deployment(spec, settings, image),
    }
}

/// The ClusterRole's rules: upstream's for AWS, without the `extensions` group (served by no Kubernetes Ballast
/// runs) and without dynamic resource allocation's, whose feature the autoscaler leaves off by default.
fn cluster_rules() -> Vec<PolicyRule> {
    let read = ["watch", "list", "get"];
    vec![
        rule(&[""], &["events", "endpoints"], &["create", "patch"]),
        // Scale-down drains a node through evictions, and marks pods it cannot place.
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(&[""], &["pods/status"], &["update"]),
        named_rule(&[""], &["endpoints"], &[NAME], &["get", "update"]),
        // It taints a node it is about to remove (ToBeDeletedByClusterAutoscaler) and deletes it after.
        rule(
            &[""],
            &["nodes"],
            &["watch", "list", "get", "update", "delete"],
        ),
        rule(
            &[""],
            &[
                "namespaces",
                "pods",
                "services",
                "replicationcontrollers",
                "persistentvolumeclaims",
                "persistentvolumes",
            ],
            &read,
        ),
        rule(&["batch"], &["jobs", "cronjobs"], &read),
        rule(&["policy"], &["poddisruptionbudgets"], &["watch", "list"]),
        rule(
            &["apps"],
            &["statefulsets", "replicasets", "daemonsets"],
            &read,
        ),
        rule(
            &["storage.k8s.io"],
            &[
                "storageclasses",
                "csinodes",
                "csidrivers",
                "csistoragecapacities",
                "volumeattachments",
            ],
            &read,
        ),
        // Leader election: any lease may be created, only its own read and renewed.
        rule(&["coordination.k8s.io"], &["leases"], &["create"]),
        named_rule(
            &["coordination.k8s.io"],
            &["leases"],
            &[NAME],
            &["get", "update"],
        ),
    ]
}

fn named_rule(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        resource_names: Some(names.iter().map(|s| s.to_string()).collect()),
        ..rule(groups, resources, verbs)
    }
}

/// The priority expander's `priorities` document: `<priority>:` then a list of regular expressions, one per
/// group, each anchored and with its regex characters escaped, so it matches that group's name and no other.
pub fn priorities_yaml(tiers: &[PriorityTier]) -> String {
    let mut out = String::new();
    for tier in tiers {
        out.push_str(&format!("{}:\n", tier.priority));
        for group in &tier.groups {
            // Single-quoted YAML: a backslash is literal there, and a quote is doubled.
            let regex = format!("^{}$", escape_regex(group)).replace('\'', "''");
            out.push_str(&format!("  - '{regex}'\n"));
        }
    }
    out
}

fn escape_regex(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The container's arguments: each setting one flag, then the discovery of the cluster's tagged groups.
pub fn flags(cluster: &str, settings: &ClusterAutoscalerSettings) -> Vec<String> {
    vec![
        "--v=2".into(),
        "--cloud-provider=aws".into(),
        format!(
            "--node-group-auto-discovery=asg:tag={ENABLED_TAG},{}",
            cluster_tag(cluster)
        ),
        format!("--expander={}", settings.expander.flag_value()),
        format!(
            "--balance-similar-node-groups={}",
            settings.balance_similar_node_groups
        ),
        format!(
            "--skip-nodes-with-local-storage={}",
            settings.skip_nodes_with_local_storage
        ),
        format!(
            "--skip-nodes-with-system-pods={}",
            settings.skip_nodes_with_system_pods
        ),
        format!(
            "--scale-down-delay-after-add={}",
            settings.scale_down_delay_after_add
        ),
        format!(
            "--scale-down-unneeded-time={}",
            settings.scale_down_unneeded_time
        ),
        format!(
            "--max-node-provision-time={}",
            settings.max_node_provision_time
        ),
    ]
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), NAME.to_string())])
}

fn deployment(spec: &NodeSpec, settings: &ClusterAutoscalerSettings, image: &str) -> Deployment {
    let health = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/health-check".into()),
            port: IntOrString::Int(METRICS_PORT),
            ..Default::default()
        }),
        period_seconds: Some(10),
        failure_threshold: Some(3),
        ..Default::default()
    };
    let container = Container {
        name: NAME.into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["./cluster-autoscaler".into()]),
        args: Some(flags(&spec.cluster_name, settings)),
        env: Some(vec![EnvVar {
            name: "AWS_REGION".into(),
            value: Some(settings.region.clone()),
            ..Default::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: METRICS_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        liveness_probe: Some(health),
        resources: Some(requests("100m", "300Mi")),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut pod = PodSpec {
        containers: vec![container],
        // On a control-plane node: without IRSA its instance role holds the Auto Scaling permissions, and a
        // worker's never does (so a pod escaping to a worker could not size groups either way).
        node_selector: Some(BTreeMap::from([(
            CONTROL_PLANE_LABEL.to_string(),
            String::new(),
        )])),
        tolerations: Some(vec![tolerate(CONTROL_PLANE_LABEL)]),
        priority_class_name: Some("system-cluster-critical".into()),
        service_account_name: Some(SERVICE_ACCOUNT.into()),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(65_534),
            run_as_group: Some(65_534),
            fs_group: Some(65_534),
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Some(role) = super::objects::addon_role(spec, |r| &r.cluster_autoscaler) {
        super::objects::on_web_identity(&mut pod, &[], role);
    }
    Deployment {
        metadata: meta(NAME, Some(KUBE_SYSTEM), NAME),
        spec: Some(DeploymentSpec {
            // One replica, as kops runs it: it elects a leader anyway, and a lost node's pod is rescheduled on
            // another control-plane node.
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::spec::{AutoscalerExpander, ClusterAutoscalerSpec};

    fn settings() -> ClusterAutoscalerSettings {
        ClusterAutoscalerSettings {
            region: "us-west-2".into(),
            expander: AutoscalerExpander::Random,
            balance_similar_node_groups: false,
            skip_nodes_with_local_storage: true,
            skip_nodes_with_system_pods: true,
            scale_down_delay_after_add: "10m".into(),
            scale_down_unneeded_time: "10m".into(),
            max_node_provision_time: "15m".into(),
            priorities: Vec::new(),
        }
    }

    /// camelCase -> kebab-case: a spec option's name as the autoscaler's flag.
    fn kebab(field: &str) -> String {
        let mut out = String::new();
        for c in field.chars() {
            if c.is_ascii_uppercase() {
                out.push('-');
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Every option `spec.clusterAutoscaler` accepts reaches the flag of the same name with the value written:
    /// the options are enumerated from the spec type's serialized form, so an option added to the spec and not
    /// to the flags fails here instead of being accepted and ignored.
    #[test]
    fn every_option_of_the_spec_reaches_its_flag() {
        use ballast_state::generate::{generate, ClusterTemplate};
        let written = ClusterAutoscalerSpec {
            enabled: Some(true),
            expander: Some(AutoscalerExpander::LeastWaste),
            balance_similar_node_groups: Some(true),
            skip_nodes_with_local_storage: Some(false),
            skip_nodes_with_system_pods: Some(false),
            scale_down_delay_after_add: Some("7m".into()),
            scale_down_unneeded_time: Some("11m".into()),
            max_node_provision_time: Some("23m".into()),
        };
        let mut config = generate(&ClusterTemplate {
            name: "flags.example.com".into(),
            zones: vec!["us-west-2a".into()],
            ..Default::default()
        })
        .expect("template");
        config.cluster.spec.cluster_autoscaler = Some(written.clone());
        let completed = ballast_state::defaults::complete(&config);
        let settings = ballast_state::autoscaler::settings(&completed).expect("enabled");
        let args = flags("flags.example.com", &settings);
        let options = serde_json::to_value(&written).expect("json");
        let options = options.as_object().expect("an object");
        // Every field is set, so every option is enumerated (a new Option field left None would be skipped by
        // serde and missed: the count holds the list to the type's).
        assert_eq!(options.len(), 8, "{options:?}");
        for (field, value) in options {
            if field == "enabled" {
                // Not a flag: it is whether the Deployment exists at all.
                continue;
            }
            let value = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let flag = format!("--{}={value}", kebab(field));
            assert!(
                args.contains(&flag),
                "spec.clusterAutoscaler.{field} does not reach {flag}: {args:?}"
            );
        }
        assert!(args.contains(&"--cloud-provider=aws".to_string()));
        assert!(args.contains(
            &"--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/flags.example.com"
                .to_string()
        ));
    }

    #[test]
    fn the_priority_expander_s_groups_are_anchored_escaped_regexes_highest_first() {
        let yaml = priorities_yaml(&[
            PriorityTier {
                priority: 50,
                groups: vec!["spot.demo.example.com".into()],
            },
            PriorityTier {
                priority: 0,
                groups: vec!["a.demo.example.com".into(), "b.demo.example.com".into()],
            },
        ]);
        assert_eq!(
            yaml,
            "50:\n  - '^spot\\.demo\\.example\\.com$'\n0:\n  - '^a\\.demo\\.example\\.com$'\n  - '^b\\.demo\\.example\\.com$'\n"
        );
        let parsed: BTreeMap<u32, Vec<String>> = yaml_serde::from_str(&yaml).expect("yaml");
        assert_eq!(
            parsed[&50],
            vec!["^spot\\.demo\\.example\\.com$".to_string()]
        );
        assert_eq!(parsed[&0].len(), 2);
    }

    #[test]
    fn no_priorities_no_config_map() {
        let spec: NodeSpec = test_spec();
        let objects = cluster_autoscaler(&spec, &settings(), "example/ca:v1@sha256:00");
        assert!(objects.priority_config.is_none());
        let mut with = settings();
        with.expander = AutoscalerExpander::Priority;
        with.priorities = vec![PriorityTier {
            priority: 1,
            groups: vec!["nodes.x".into()],
        }];
        let objects = cluster_autoscaler(&spec, &with, "example/ca:v1@sha256:00");
        let config = objects.priority_config.expect("a ConfigMap");
        assert_eq!(config.metadata.name.as_deref(), Some(PRIORITY_CONFIG_MAP));
    }

    fn test_spec() -> NodeSpec {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/control-plane/spec.yaml"),
        )
        .expect("spec");
        yaml_serde::from_str(&text).expect("a node spec")
    }
}
