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
  kubernetesVersion: 1.36.4
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
        "  kubernetesVersion: 1.36.4\n",
        &format!(
            "  kubernetesVersion: 1.36.4\n  x: {}{}\n",
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
    // "Billion laughs": nine levels of ten aliases each, 10^9 values in under 1 KiB.
    let mut laughs = String::from(
        "  cloudLabels:\n    a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for level in 1..=9 {
        let items = vec![format!("*a{}", level - 1); 10].join(", ");
        laughs.push_str(&format!("    a{level}: &a{level} [{items}]\n"));
    }
    let laughing = SPEC.replacen("  subnets:\n", &format!("{laughs}  subnets:\n"), 1);
    vec![
        (
            "laughs.yaml",
            laughing,
            "laughs.yaml: expands through its YAML aliases (*name) to more than",
        ),
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
            "Cluster/files.example.com: spec.cloudLabels: 2000 labels, more than 43",
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

/// `replace -f` of a file giving one group twice: the second silently replaced the first (or half the change
/// landed). Refused naming both, and the store is left as it was.
#[test]
fn a_group_given_twice_in_one_file_is_refused_and_changes_nothing() {
    let env = with_a_cluster();
    let before = env.snapshot();
    let group = |max: u32| {
        format!(
            "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {{name: nodes}}\n\
             spec: {{role: Node, subnets: [us-west-2a], minSize: 1, maxSize: {max}}}\n"
        )
    };
    let path = env.write("twice.yaml", &format!("{}---\n{}", group(3), group(9)));
    for verb in [&["replace"][..], &["create"]] {
        env.ballast()
            .args(verb)
            .args(["--name", NAME, "-f"])
            .arg(&path)
            .assert()
            .code(3)
            .stderr(predicate::str::contains(
                "InstanceGroup/nodes: metadata.name: is given twice, as the file's instance groups 1 and 2",
            ));
        assert_eq!(env.snapshot(), before, "{verb:?} changed the store");
    }
}

/// IAM role names are at most 64 characters, and a cluster's are `control-plane.<cluster>`: a 50-character name
/// is the longest, and its role names fit; one more is refused before anything is stored.
#[test]
fn a_cluster_name_too_long_for_its_iam_roles_is_refused() {
    use ballast::cloud::model::role_resource_name;
    use ballast_state::spec::Role;
    let longest = format!("{}.example.com", "a".repeat(38));
    assert_eq!(longest.len(), ballast_state::limits::MAX_CLUSTER_NAME_CHARS);
    for role in [Role::ControlPlane, Role::Node] {
        assert!(role_resource_name(&longest, role).len() <= 64, "{role:?}");
    }
    let env = Env::new();
    let too_long = format!("b{longest}");
    env.ballast()
        .args(["create", "cluster", "--name", &too_long, "--zones", "us-west-2a"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "is 51 characters, longer than 50: the cluster's IAM roles are named control-plane.<cluster>",
        ));
    assert!(env.snapshot().is_empty(), "{:?}", env.snapshot());
    env.ballast()
        .args([
            "create",
            "cluster",
            "--name",
            &longest,
            "--zones",
            "us-west-2a",
        ])
        .assert()
        .success();
}

/// A path flag naming no regular file: /dev/zero never ends and says it has no size; a FIFO with no writer would
/// block its open forever. Each is refused by its type, naming the flag, before anything is read or stored; and
/// a regular file over its limit is refused naming the limit.
#[test]
fn path_flags_read_regular_files_only_and_within_their_limits() {
    let env = with_a_cluster();
    let fifo = env.dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let big = env.write("big.pem", &"A".repeat(1024 * 1024 + 1));
    let before = env.snapshot();
    for (path, kind) in [
        (
            std::path::PathBuf::from("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (fifo.clone(), "is a named pipe (FIFO), not a regular file"),
    ] {
        let p = path.display().to_string();
        let cases: Vec<(Vec<String>, String)> = vec![
            (vec!["create".into(), "-f".into(), p.clone()], p.clone()),
            (
                vec![
                    "--name".into(),
                    NAME.into(),
                    "create".into(),
                    "secret".into(),
                    "keypair".into(),
                    "kubernetes-ca".into(),
                    "--cert".into(),
                    p.clone(),
                    "--key".into(),
                    p.clone(),
                ],
                format!("--cert {p}"),
            ),
            (
                vec![
                    "--name".into(),
                    NAME.into(),
                    "create".into(),
                    "secret".into(),
                    "sshpublickey".into(),
                    "--pubkey".into(),
                    p.clone(),
                ],
                format!("--pubkey {p}"),
            ),
            (
                vec![
                    "create".into(),
                    "cluster".into(),
                    "--name".into(),
                    "shared.example.com".into(),
                    "--zones".into(),
                    "us-west-2a".into(),
                    "--shared-from".into(),
                    p.clone(),
                ],
                format!("--shared-from {p}"),
            ),
        ];
        for (args, names) in cases {
            let start = Instant::now();
            env.ballast()
                .args(&args)
                .assert()
                .code(2)
                .stderr(predicate::str::contains(format!("{names}: {kind}")));
            assert!(start.elapsed() < Duration::from_secs(10), "{args:?}");
        }
    }
    env.ballast()
        .args([
            "--name",
            NAME,
            "create",
            "secret",
            "keypair",
            "kubernetes-ca",
            "--cert",
        ])
        .arg(&big)
        .arg("--key")
        .arg(&big)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "--cert {}: is larger than the limit of 1048576 bytes for a PEM certificate or key",
            big.display()
        )));
    assert_eq!(env.snapshot(), before);
}
