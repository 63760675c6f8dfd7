//! `ballast` given input past its limits (state/src/limits.rs): each is refused quickly, with a message naming
//! the flag or the file and the limit, and the state store is left exactly as it was.

mod common;

use std::time::{Duration, Instant};

use predicates::prelude::*;

const NAME: &str = "demo.example.com";

/// A spec file for `create -f`: one cluster in one zone.
const SPEC: &str = "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata: {name: files.example.com}
spec:
  kubernetesVersion: 1.33.4
  subnets:
  - {name: us-west-2a, zone: us-west-2a}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {name: control-plane}
spec: {role: ControlPlane, subnets: [us-west-2a]}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {name: nodes}
spec: {role: Node, subnets: [us-west-2a]}
";

type Env = common::TempStore;

/// A store holding one cluster, so "unchanged" is checked against a store with content.
fn with_a_cluster() -> Env {
    Env::with_cluster(NAME, "us-west-2a")
}

#[test]
fn numeric_flags_out_of_their_domain_are_usage_errors_naming_the_flag() {
    let env = with_a_cluster();
    let before = env.snapshot();
    for (flag, value, says) in [
        // Ran out of memory generating 4294967295 groups before this was bounded.
        ("--control-plane-count", "4294967295", "must be 1, 3 or 5"),
        ("--control-plane-count", "4", "must be 1, 3 or 5"),
        ("--node-count", "4294967295", "0..=1000"),
        ("--node-count", "1001", "0..=1000"),
    ] {
        let start = Instant::now();
        env.ballast()
            .args(["create", "cluster", "--name", "other.example.com"])
            .args(["--zones", "us-west-2a", flag, value])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(flag).and(predicate::str::contains(says)));
        assert!(start.elapsed() < Duration::from_secs(10), "{flag} {value}");
    }
    assert_eq!(env.snapshot(), before);
}

/// Files each past one limit, and what the refusal must say.
fn bad_files() -> Vec<(&'static str, String, &'static str)> {
    let deep = SPEC.replace(
        "  kubernetesVersion: 1.33.4\n",
        &format!(
            "  kubernetesVersion: 1.33.4\n  x: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    );
    let mut huge = SPEC.to_string();
    while huge.len() <= 1024 * 1024 {
        huge.push_str("# a comment line to make the file larger than the limit, which is 1 MiB\n");
    }
    let mut labels = String::from("  cloudLabels:\n");
    for i in 0..2_000 {
        labels.push_str(&format!("    \"key\\n{i}\": \"value\\nline\"\n"));
    }
    let labelled = SPEC.replacen("  subnets:\n", &format!("{labels}  subnets:\n"), 1);
    let no_kind = SPEC.replace(
        "kind: InstanceGroup\nmetadata: {name: nodes}",
        "metadata: {name: nodes}",
    );
    let tagged = SPEC.replace("{role: Node,", "{role: !Node ,");
    vec![
        (
            "deep.yaml",
            deep,
            "deep.yaml: nests deeper than 64 levels at line 6",
        ),
        (
            "huge.yaml",
            huge,
            "huge.yaml: is larger than the limit of 1048576 bytes",
        ),
        (
            "labels.yaml",
            labelled,
            "Cluster/files.example.com: spec.cloudLabels: 2000 labels, more than 44",
        ),
        (
            "no-kind.yaml",
            no_kind,
            "document 3 (name \"nodes\"): kind: is missing",
        ),
        (
            "tagged.yaml",
            tagged,
            "InstanceGroup/nodes: spec.role: has the YAML tag !Node",
        ),
    ]
}

#[test]
fn bad_files_are_refused_quickly_and_change_nothing() {
    let env = with_a_cluster();
    let before = env.snapshot();
    for (name, text, says) in bad_files() {
        let path = env.write(name, &text);
        // `replace --force` reaches validation even for a cluster the store does not hold.
        for verb in [&["create"][..], &["replace", "--force"]] {
            let start = Instant::now();
            env.ballast()
                .args(verb)
                .arg("-f")
                .arg(&path)
                .assert()
                .code(3)
                .stderr(predicate::str::contains(says));
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{verb:?} -f {name} took {:?}",
                start.elapsed()
            );
            assert_eq!(
                env.snapshot(),
                before,
                "{verb:?} -f {name} changed the store"
            );
        }
    }
}

#[test]
fn a_file_starting_with_a_byte_order_mark_is_read_as_its_spec() {
    let env = with_a_cluster();
    let path = env.write("bom.yaml", &format!("\u{feff}{SPEC}"));
    env.ballast()
        .args(["create", "-f"])
        .arg(&path)
        .assert()
        .success();
    env.ballast()
        .args(["get", "clusters", "files.example.com"])
        .assert()
        .success();
}
