//! `spec.cilium.agentPodAnnotations` / `operatorPodAnnotations`: bounded and checked as the API server checks
//! annotation keys, each error naming its field; in the control-plane node specs only, and absent when empty.

use std::collections::BTreeMap;

use ballast_state::defaults::complete;
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::node::render_node_spec;
use ballast_state::spec::{CiliumSpec, ClusterConfig, Networking, Role};
use ballast_state::validate::validate;

fn cluster(agent: BTreeMap<String, String>, operator: BTreeMap<String, String>) -> ClusterConfig {
    let mut config = generate(&ClusterTemplate {
        name: "demo.example.com".into(),
        zones: vec!["us-west-2a".into()],
        ..Default::default()
    })
    .expect("template");
    config.cluster.spec.networking = Some(Networking::Cilium);
    config.cluster.spec.cilium = Some(CiliumSpec {
        agent_pod_annotations: agent,
        operator_pod_annotations: operator,
        ..Default::default()
    });
    complete(&config)
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn good_annotations_pass_and_reach_the_control_plane_s_node_spec_only() {
    let agent = map(&[("test1", "true"), ("example.com/team", "network")]);
    let operator = map(&[("test3", "cilium-operator")]);
    let config = cluster(agent.clone(), operator.clone());
    let errors = validate(&config);
    assert!(errors.is_empty(), "{errors:#?}");
    for ig in &config.instance_groups {
        let rendered =
            render_node_spec(&config, &ig.metadata.name, "s3://state", "api.example.com")
                .expect("node spec");
        if ig.spec.role == Role::ControlPlane {
            assert_eq!(rendered.spec.cilium_agent_pod_annotations, agent);
            assert_eq!(rendered.spec.cilium_operator_pod_annotations, operator);
        } else {
            assert!(
                !rendered.yaml.contains("PodAnnotations"),
                "{}",
                rendered.yaml
            );
        }
    }
    // Without them, no node spec names them (its hash is the one before the field existed).
    let plain = cluster(BTreeMap::new(), BTreeMap::new());
    for ig in &plain.instance_groups {
        let rendered = render_node_spec(&plain, &ig.metadata.name, "s3://state", "api.example.com")
            .expect("node spec");
        assert!(
            !rendered.yaml.contains("PodAnnotations"),
            "{}",
            rendered.yaml
        );
    }
}

#[test]
fn bad_keys_long_values_and_too_many_are_refused_by_field() {
    let long = "x".repeat(4097);
    let config = cluster(
        map(&[("-bad", "v"), ("a/b/c", "v"), ("ok", long.as_str())]),
        (0..33)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect(),
    );
    let errors: Vec<String> = validate(&config).iter().map(|e| e.to_string()).collect();
    for wanted in [
        "Cluster/demo.example.com: spec.cilium.agentPodAnnotations.-bad: is not a valid annotation key",
        "Cluster/demo.example.com: spec.cilium.agentPodAnnotations.a/b/c: is not a valid annotation key",
        "Cluster/demo.example.com: spec.cilium.agentPodAnnotations.ok: its value is 4097 bytes, more than 4096",
        "Cluster/demo.example.com: spec.cilium.operatorPodAnnotations: 33 annotations, more than 32",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(wanted)),
            "{wanted} not in {errors:#?}"
        );
    }
}
