//! Switching `spec.networking` reaches the nodes through their node specs, and only through them: every group's
//! node spec changes (so its sha256 in the launch template's user-data changes and `rolling-update cluster`
//! replaces the instances), and the only line that changes is `networking`. The add-ons each networking choice
//! installs are rendered by nodeup from that field (nodeup/tests/addons.rs).

use ballast_state::defaults::complete;
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::node::render_node_spec;
use ballast_state::spec::{ClusterConfig, Networking};

fn cluster(networking: Networking) -> ClusterConfig {
    complete(
        &generate(&ClusterTemplate {
            name: "switch.example.com".into(),
            zones: vec![
                "us-west-2a".into(),
                "us-west-2b".into(),
                "us-west-2c".into(),
            ],
            networking: Some(networking),
            ..Default::default()
        })
        .expect("the template is valid"),
    )
}

fn changed_lines(before: &str, after: &str) -> Vec<(String, String)> {
    assert_eq!(before.lines().count(), after.lines().count());
    before
        .lines()
        .zip(after.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn switching_networking_changes_every_node_spec_in_its_networking_line_only() {
    let choices = [
        (Networking::Cilium, "cilium"),
        (Networking::Calico, "calico"),
        (Networking::AmazonVpc, "amazon-vpc"),
    ];
    for (from, from_name) in choices {
        for (to, to_name) in choices {
            if from == to {
                continue;
            }
            let (before, after) = (cluster(from), cluster(to));
            assert_eq!(before.instance_groups.len(), after.instance_groups.len());
            for group in &before.instance_groups {
                let name = &group.metadata.name;
                let old = render_node_spec(&before, name, "s3://bucket/p", "api.example")
                    .expect("renders");
                let new = render_node_spec(&after, name, "s3://bucket/p", "api.example")
                    .expect("renders");
                assert_ne!(old.sha256, new.sha256, "{name}: {from_name} -> {to_name}");
                assert_eq!(
                    changed_lines(&old.yaml, &new.yaml),
                    vec![(
                        format!("networking: {from_name}"),
                        format!("networking: {to_name}")
                    )],
                    "{name}: {from_name} -> {to_name}"
                );
            }
        }
    }
}
