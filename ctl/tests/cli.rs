//! `ballast` end to end, as an operator runs it: the real binary against a file state store in a temp dir.

mod common;

use predicates::prelude::*;

const NAME: &str = "demo.example.com";
const ZONES: &str = "us-west-2a,us-west-2b,us-west-2c";

type Env = common::TempStore;

#[test]
fn create_cluster_with_only_zones_gives_an_ha_spec() {
    let env = Env::new();
    env.ballast()
        .args(["create", "cluster", "--name", NAME, "--zones", ZONES])
        .assert()
        .success()
        .stdout("")
        .stderr(predicate::str::contains("stored in"));
    env.ballast()
        .args(["get", "ig", "--name", NAME])
        .assert()
        .success()
        .stdout(
            "NAME                       ROLE           MACHINETYPE   MIN   MAX   ZONES\n\
             control-plane-us-west-2a   ControlPlane   t3.medium     1     1     us-west-2a\n\
             control-plane-us-west-2b   ControlPlane   t3.medium     1     1     us-west-2b\n\
             control-plane-us-west-2c   ControlPlane   t3.medium     1     1     us-west-2c\n\
             nodes                      Node           t3.medium     3     3     us-west-2a,us-west-2b,us-west-2c\n",
        );
    env.ballast()
        .args(["get", "clusters"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "demo.example.com   1.36.4       us-west-2",
        ));
    // The PKI and secrets exist, owner-only.
    for key in [
        "pki/kubernetes-ca/cert.pem",
        "pki/kubernetes-ca/key.pem",
        "pki/etcd-ca/key.pem",
        "pki/service-account/key.pem",
        "secrets/encryption-keys.yaml",
    ] {
        let path = env.store_dir().join(NAME).join(key);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).expect(key).permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    // Creating it again is a conflict that changes nothing.
    let before = env.snapshot();
    env.ballast()
        .args(["create", "cluster", "--name", NAME, "--zones", ZONES])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("already exists"));
    assert_eq!(env.snapshot(), before);
}

#[test]
fn dry_run_prints_the_spec_and_stores_nothing() {
    let env = Env::new();
    let output = env
        .ballast()
        .args([
            "create",
            "cluster",
            "--name",
            NAME,
            "--zones",
            "us-west-2a",
            "--dry-run",
            "-o",
            "yaml",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(output).expect("utf8");
    assert!(
        text.contains("kind: Cluster") && text.contains("name: control-plane-us-west-2a"),
        "{text}"
    );
    assert!(!env.store_dir().exists(), "dry run wrote to the store");
    // The printed spec is a valid input.
    let file = env.write("spec.yaml", &text);
    env.ballast()
        .args(["create", "-f"])
        .arg(&file)
        .assert()
        .success();
    env.ballast()
        .args(["get", "ig", "--name", NAME, "-o", "json"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"role\": \"ControlPlane\""));
}

#[test]
fn bad_flags_are_usage_errors_and_change_nothing() {
    let env = Env::with_cluster(NAME, ZONES);
    let before = env.snapshot();
    for (args, message) in [
        (
            vec!["create", "cluster", "--name", "other.example.com"],
            "--zones: is required",
        ),
        (
            vec![
                "create",
                "cluster",
                "--name",
                "Bad_Name",
                "--zones",
                "us-west-2a",
            ],
            "cluster name: \"Bad_Name\" is not a valid DNS name",
        ),
        (
            vec![
                "create",
                "cluster",
                "--name",
                "x.example.com",
                "--zones",
                "us-west-2a",
                "--topology",
                "hybrid",
            ],
            "invalid value 'hybrid'",
        ),
        (
            vec![
                "create",
                "cluster",
                "--name",
                "x.example.com",
                "--zones",
                "us-west-2a",
                "--control-plane-zones",
                "us-west-2b",
            ],
            "\"us-west-2b\" is not one of --zones",
        ),
        (vec!["get", "ig"], "which cluster?"),
        (vec!["frobnicate"], "unrecognized subcommand"),
    ] {
        env.ballast()
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(message));
    }
    // A flag that makes an invalid spec names the spec field; nothing is stored.
    env.ballast()
        .args([
            "create",
            "cluster",
            "--name",
            "x.example.com",
            "--zones",
            "us-west-2a",
            "--network-cidr",
            "10.0.0.0/33",
        ])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "spec.networkCIDR: \"10.0.0.0/33\" is not a valid IPv4 CIDR",
        ));
    env.ballast()
        .args([
            "create",
            "cluster",
            "--name",
            "y.example.com",
            "--zones",
            "us-west-2a,us-west-2b",
            "--control-plane-count",
            "2",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "'--control-plane-count <CONTROL_PLANE_COUNT>': must be 1, 3 or 5",
        ));
    assert_eq!(env.snapshot(), before);
    env.ballast()
        .args([
            "create",
            "cluster",
            "--name",
            "z.example.com",
            "--zones",
            "us-west-2a",
        ])
        .env_remove("BALLAST_STATE")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no state store given"));
}

#[test]
fn invalid_files_report_every_error_and_change_nothing() {
    let env = Env::with_cluster(NAME, ZONES);
    let before = env.snapshot();
    let file = env.write(
        "bad.yaml",
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: nodes}\n\
         spec: {role: Node, minSize: 5, maxSize: 2, subnets: [nowhere], machinetype: big}\n",
    );
    env.ballast()
        .args(["replace", "-f"])
        .arg(&file)
        .args(["--name", NAME])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "spec.machinetype: unknown field \"machinetype\"",
        ));
    let file = env.write(
        "bad2.yaml",
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: nodes}\n\
         spec: {role: Node, minSize: 5, maxSize: 2, subnets: [nowhere]}\n",
    );
    env.ballast()
        .args(["replace", "-f"])
        .arg(&file)
        .args(["--name", NAME])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "InstanceGroup/nodes: spec.minSize: 5 is larger than maxSize 2",
        ))
        .stderr(predicate::str::contains(
            "InstanceGroup/nodes: spec.subnets[0]: \"nowhere\" is not a subnet of the cluster",
        ))
        .stderr(predicate::str::contains("nothing was changed"));
    assert_eq!(env.snapshot(), before);
}

#[test]
fn replace_changes_one_group_and_the_completed_spec() {
    let env = Env::with_cluster(NAME, ZONES);
    let file = env.write(
        "nodes.yaml",
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: nodes}\n\
         spec: {role: Node, machineType: m6i.large, minSize: 2, maxSize: 4}\n",
    );
    env.ballast()
        .args(["replace", "-f"])
        .arg(&file)
        .args(["--name", NAME])
        .assert()
        .success();
    env.ballast()
        .args(["get", "ig", "nodes", "--name", NAME])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "nodes   Node   m6i.large     2     4     us-west-2a,us-west-2b,us-west-2c",
        ));
    let completed = std::fs::read_to_string(env.store_dir().join(NAME).join("completed.yaml"))
        .expect("completed");
    assert!(completed.contains("machineType: m6i.large"), "{completed}");
    // A new group needs --force with replace.
    let file = env.write(
        "gpu.yaml",
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: gpu}\nspec: {role: Node}\n",
    );
    env.ballast()
        .args(["replace", "-f"])
        .arg(&file)
        .args(["--name", NAME])
        .assert()
        .code(5);
    env.ballast()
        .args(["create", "-f"])
        .arg(&file)
        .args(["--name", NAME])
        .assert()
        .success();
    env.ballast()
        .args(["create", "-f"])
        .arg(&file)
        .args(["--name", NAME])
        .assert()
        .code(4);
}

/// A release past its end of life is refused for a new cluster, naming the releases that are not, with no
/// state written; a cluster's upgrade moves one minor at a time and never back.
#[test]
fn releases_past_their_end_of_life_and_skipped_minors_are_refused() {
    let env = Env::new();
    for old in ["1.34.0", "1.33.4", "1.32.8"] {
        let minor = &old[..4];
        env.ballast()
            .args(["create", "cluster", "--name", NAME, "--zones", ZONES])
            .args(["--kubernetes-version", old])
            .assert()
            .failure()
            .stderr(
                predicate::str::contains("spec.kubernetesVersion")
                    .and(predicate::str::contains(format!(
                        "Kubernetes {minor} reached its end of life"
                    )))
                    .and(predicate::str::contains("one of 1.35, 1.36, 1.37")),
            );
        assert!(env.snapshot().is_empty(), "{old}: state was written");
    }
    // The same for a spec file, and for a dry run.
    let file = env.write(
        "old.yaml",
        &format!(
            "apiVersion: ballast.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {NAME}}}\n\
             spec:\n  kubernetesVersion: 1.34.0\n  subnets:\n  - {{name: us-west-2a, zone: us-west-2a}}\n\
             ---\napiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {{name: control-plane}}\n\
             spec: {{role: ControlPlane, subnets: [us-west-2a]}}\n"
        ),
    );
    env.ballast()
        .args(["create", "-f"])
        .arg(&file)
        .assert()
        .failure()
        .stderr(predicate::str::contains("1.34 reached its end of life"));
    env.ballast()
        .args([
            "create",
            "cluster",
            "--name",
            NAME,
            "--zones",
            ZONES,
            "--dry-run",
        ])
        .args(["--kubernetes-version", "1.34.0"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("1.34 reached its end of life"));
    assert!(env.snapshot().is_empty(), "state was written");

    // A supported release is created; from it, 1.37 skips a minor and 1.34 goes back: both refused.
    env.ballast()
        .args(["create", "cluster", "--name", NAME, "--zones", ZONES])
        .args(["--kubernetes-version", "1.35.8"])
        .assert()
        .success();
    let before = env.snapshot();
    let cluster = |version: &str| {
        let text = env
            .ballast()
            .args(["get", "clusters", NAME, "-o", "yaml"])
            .output()
            .expect("get clusters runs");
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        assert!(text.contains("kubernetesVersion: 1.35.8"), "{text}");
        env.write(
            &format!("cluster-{version}.yaml"),
            &text.replace(
                "kubernetesVersion: 1.35.8",
                &format!("kubernetesVersion: {version}"),
            ),
        )
    };
    for (version, why) in [("1.37.1", "skips a minor"), ("1.34.0", "1.35.8")] {
        env.ballast()
            .args(["replace", "-f"])
            .arg(cluster(version))
            .args(["--name", NAME])
            .assert()
            .failure()
            .stderr(
                predicate::str::contains("spec.kubernetesVersion")
                    .and(predicate::str::contains(why)),
            );
        assert_eq!(env.snapshot(), before, "{version}: state changed");
    }
    // The next minor is an upgrade.
    env.ballast()
        .args(["replace", "-f"])
        .arg(cluster("1.36.4"))
        .args(["--name", NAME])
        .assert()
        .success();
    env.ballast()
        .args(["get", "clusters"])
        .assert()
        .success()
        .stdout(predicate::str::contains("demo.example.com   1.36.4"));
}

/// An editor script: runs `sed` on the file it is given.
fn sed_editor(env: &Env, expression: &str) -> String {
    let script = env.write(
        "editor.sh",
        &format!("#!/bin/sh\nsed -i '{expression}' \"$1\"\n"),
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    script.display().to_string()
}

#[test]
fn edit_validates_before_saving() {
    let env = Env::with_cluster(NAME, ZONES);
    let editor = sed_editor(&env, "s/maxSize: 3/maxSize: 7/");
    env.ballast()
        .args(["edit", "ig", "nodes", "--name", NAME])
        .env("EDITOR", &editor)
        .assert()
        .success()
        .stderr(predicate::str::contains("Saved InstanceGroup/nodes"));
    env.ballast()
        .args(["get", "ig", "nodes", "--name", NAME, "-o", "yaml"])
        .assert()
        .success()
        .stdout(predicate::str::contains("maxSize: 7"));

    // An invalid edit is refused, nothing changes, and the edit is kept in a file.
    let before = env.snapshot();
    let editor = sed_editor(&env, "s/maxSize: 7/maxSize: 1/");
    let assert = env
        .ballast()
        .args(["edit", "ig", "nodes", "--name", NAME])
        .env("EDITOR", &editor)
        .env("TMPDIR", env.dir.path())
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "spec.minSize: 3 is larger than maxSize 1",
        ))
        .stderr(predicate::str::contains("Your edit is kept in"));
    assert_eq!(env.snapshot(), before);
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).expect("utf8");
    let kept = stderr
        .split("kept in ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .expect("kept path");
    assert!(std::fs::read_to_string(kept)
        .expect("kept edit")
        .contains("maxSize: 1"));

    // An editor that changes nothing cancels.
    let editor = sed_editor(&env, "s/no-such-text/x/");
    env.ballast()
        .args(["edit", "cluster", "--name", NAME])
        .env("EDITOR", &editor)
        .assert()
        .success()
        .stderr(predicate::str::contains("nothing changed"));
}

#[test]
fn edit_reports_a_concurrent_change_instead_of_overwriting_it() {
    let env = Env::with_cluster(NAME, ZONES);
    let ballast = assert_cmd::cargo::cargo_bin("ballast");
    // While "the operator" edits, someone else replaces the same group.
    let other = env.write(
        "other.yaml",
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: nodes}\n\
         spec: {role: Node, minSize: 1, maxSize: 9}\n",
    );
    let script = env.write(
        "editor.sh",
        &format!(
            "#!/bin/sh\nsed -i 's/maxSize: 3/maxSize: 5/' \"$1\"\n{} replace -f {} --name {NAME}\n",
            ballast.display(),
            other.display()
        ),
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    env.ballast()
        .args(["edit", "ig", "nodes", "--name", NAME])
        .env("EDITOR", &script)
        .env("TMPDIR", env.dir.path())
        .assert()
        .code(4)
        .stderr(predicate::str::contains("was changed by someone else"))
        .stderr(predicate::str::contains("Your edit is kept in"));
    env.ballast()
        .args(["get", "ig", "nodes", "--name", NAME, "-o", "yaml"])
        .assert()
        .success()
        .stdout(predicate::str::contains("maxSize: 9"));
}

#[test]
fn delete_previews_then_unregisters() {
    let env = Env::with_cluster(NAME, ZONES);
    let before = env.snapshot();
    // Every object of the cluster: the store's files but its own lock file, and its id, which `--unregister
    // --force` keeps (AWS resources may remain, and the id is what still binds them to this store).
    let id_key = format!("{NAME}/cluster-id");
    assert!(before.iter().any(|(k, _)| *k == id_key), "no {id_key}");
    let objects = before
        .iter()
        .filter(|(k, _)| k.starts_with(NAME) && **k != id_key)
        .count();
    assert!(
        objects >= 13,
        "spec, completed spec, 4 groups, PKI and secrets: {objects}"
    );
    // --force: without looking at AWS (this test has none; the refusal while AWS resources exist is tested on
    // the local cloud, tests/tests/ctl_delete_cluster.rs).
    env.ballast()
        .args(["delete", "cluster", NAME, "--unregister", "--force"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "Would delete {objects} objects"
        )))
        .stdout(predicate::str::contains(
            "demo.example.com/pki/etcd-ca/key.pem",
        ));
    assert_eq!(env.snapshot(), before);
    // --force means nothing without --unregister: refused, not ignored.
    env.ballast()
        .args(["delete", "cluster", NAME, "--force", "--yes"])
        .assert()
        .code(2);
    assert_eq!(env.snapshot(), before);
    env.ballast()
        .args([
            "delete",
            "cluster",
            NAME,
            "--unregister",
            "--force",
            "--yes",
        ])
        .assert()
        .success();
    let left: Vec<String> = env
        .snapshot()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !k.starts_with('.'))
        .collect();
    assert_eq!(left, vec![id_key.clone()], "only the cluster's id is kept");
    env.ballast()
        .args(["get", "clusters", NAME])
        .assert()
        .code(5);
    env.ballast()
        .args([
            "delete",
            "cluster",
            NAME,
            "--unregister",
            "--force",
            "--yes",
        ])
        .assert()
        .code(5);
}

#[test]
fn deleting_a_control_plane_group_is_refused_when_it_breaks_quorum_rules() {
    let env = Env::with_cluster(NAME, ZONES);
    env.ballast()
        .args([
            "delete",
            "ig",
            "control-plane-us-west-2a",
            "--name",
            NAME,
            "--yes",
        ])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "has 2 control-plane instance groups",
        ));
    env.ballast()
        .args(["delete", "ig", "nodes", "--name", NAME])
        .assert()
        .success();
    env.ballast()
        .args(["delete", "ig", "nodes", "--name", NAME, "--yes"])
        .assert()
        .success();
    env.ballast()
        .args(["get", "ig", "nodes", "--name", NAME])
        .assert()
        .code(5);
}

#[test]
fn completions_are_generated() {
    let env = Env::new();
    env.ballast()
        .args(["completion", "bash"])
        .env_remove("BALLAST_STATE")
        .assert()
        .success()
        .stdout(predicate::str::contains("_ballast()"));
}

/// The file a failed edit was kept in, as its message names it.
fn kept_edit_path(stderr: &[u8]) -> std::path::PathBuf {
    let stderr = String::from_utf8_lossy(stderr);
    stderr
        .split("kept in ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("no kept path in {stderr}"))
}

#[test]
fn failed_edits_are_kept_privately_and_never_through_a_planted_link() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::with_cluster(NAME, ZONES);
    let tmp = env.dir.path().join("tmp");
    std::fs::create_dir(&tmp).expect("mkdir tmp");
    let victim = env.write("victim", "precious\n");
    // The editor plants a link where ballast used to keep a failed edit (a fixed name with its pid, in the
    // shared temporary directory), as another user could, then makes an edit that cannot be saved.
    let script = env.write(
        "editor.sh",
        &format!(
            "#!/bin/sh\npid=$PPID\n\
             while [ \"$(cat /proc/$pid/comm)\" != ballast ]; do\n\
               pid=$(cut -d' ' -f4 /proc/$pid/stat); [ \"$pid\" -gt 1 ] || exit 1\n\
             done\n\
             ln -s {} \"$TMPDIR/ballast-edit-instancegroup-nodes-$pid.yaml\"\n\
             sed -i 's/maxSize: 3/maxSize: 1/' \"$1\"\n",
            victim.display()
        ),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut kept = Vec::new();
    for _ in 0..2 {
        let assert = env
            .ballast()
            .args(["edit", "ig", "nodes", "--name", NAME])
            .env("EDITOR", &script)
            .env("TMPDIR", &tmp)
            .assert()
            .code(3)
            .stderr(predicate::str::contains("ballast replace -f"));
        kept.push(kept_edit_path(&assert.get_output().stderr));
    }
    assert_ne!(kept[0], kept[1], "each failed edit is kept in its own file");
    for path in &kept {
        let mode = |p: &std::path::Path| {
            std::fs::symlink_metadata(p)
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(path), 0o600, "{}", path.display());
        let dir = path.parent().expect("kept in a folder");
        assert_ne!(dir, tmp, "kept in a fresh folder, not in the shared one");
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
        let text = std::fs::read_to_string(path).expect("kept edit");
        assert!(text.contains("maxSize: 1"), "{text}");
    }
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n",
        "a link at the old kept path was followed"
    );
}

#[test]
fn get_clusters_lists_the_readable_ones_and_reports_a_damaged_one() {
    const OTHER: &str = "other.example.com";
    let env = Env::with_cluster(NAME, ZONES);
    env.create_cluster(OTHER, ZONES);
    // `other`'s nodes.yaml now holds an instance group named evil: the cluster cannot be read.
    let nodes = env
        .store_dir()
        .join(OTHER)
        .join("instancegroups/nodes.yaml");
    let text = std::fs::read_to_string(&nodes).expect("nodes.yaml");
    let damaged = text.replace("name: nodes", "name: evil");
    assert_ne!(damaged, text, "nodes.yaml names its group: {text}");
    std::fs::write(&nodes, damaged).expect("damage nodes.yaml");

    for output in ["table", "yaml"] {
        env.ballast()
            .args(["get", "clusters", "-o", output])
            .assert()
            .code(1)
            .stdout(predicate::str::contains(NAME))
            .stdout(predicate::str::contains(OTHER).not())
            .stderr(predicate::str::contains(format!(
                "warning: cluster \"{OTHER}\" cannot be read"
            )))
            .stderr(predicate::str::contains(format!(
                "{OTHER}/instancegroups/nodes.yaml"
            )))
            .stderr(predicate::str::contains(
                "holds InstanceGroup/evil, but its key is for InstanceGroup/nodes",
            ))
            .stderr(predicate::str::contains(format!(
                "1 cluster(s) in {} could not be read: {OTHER}",
                env.state()
            )));
    }
    // Asked for by name, the damaged cluster fails as a damaged object does; the good one is unaffected.
    env.ballast()
        .args(["get", "clusters", OTHER])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("holds InstanceGroup/evil"))
        .stderr(predicate::str::contains(
            "to mend it: a file store keeps no earlier versions",
        ));
    env.ballast()
        .args(["get", "clusters", NAME])
        .assert()
        .success()
        .stdout(predicate::str::contains(NAME));
}

/// Logs written to a file or a pipe are plain text: no terminal colour codes for a program to trip over.
#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let env = Env::with_cluster(NAME, ZONES);
    // At debug level, opening the file store is a log line to look at.
    let out = env
        .ballast()
        .args(["-vv", "get", "clusters"])
        .output()
        .expect("ballast runs");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("file state store opened"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a piped log: {stderr:?}"
    );
}

/// A name with `/` or `..` would be a key prefix inside another cluster's objects (`NAME/pki` holds NAME's CA
/// keys): every verb refuses it, naming the name, before it touches the store, and NAME keeps all it had.
#[test]
fn a_cluster_name_that_is_not_a_dns_name_reaches_no_other_cluster() {
    let env = Env::new();
    env.ballast()
        .args(["create", "cluster", "--name", NAME, "--zones", ZONES])
        .assert()
        .success();
    let before = env.snapshot();
    let pki = format!("{NAME}/pki");
    let etcd = format!("{NAME}/etcd");
    let attempts: Vec<Vec<&str>> = vec![
        vec![
            "delete",
            "cluster",
            &pki,
            "--unregister",
            "--force",
            "--yes",
        ],
        vec![
            "delete",
            "cluster",
            &etcd,
            "--unregister",
            "--force",
            "--delete-backups",
            "--yes",
        ],
        vec!["delete", "cluster", &pki, "--yes"],
        vec!["get", "instancegroups", "--name", &pki],
        vec!["validate", "cluster", &pki],
        vec!["etcd", "list-backups", &etcd],
        vec!["export", "kubeconfig", &pki, "--admin"],
        vec![
            "create",
            "cluster",
            "--name",
            "../outside",
            "--zones",
            ZONES,
        ],
        vec![
            "delete",
            "cluster",
            "..",
            "--unregister",
            "--force",
            "--yes",
        ],
    ];
    for args in attempts {
        let out = env.ballast().args(&args).assert().code(2);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(
            stderr.contains("cluster name") && stderr.contains("not a valid DNS name"),
            "{args:?}: {stderr}"
        );
        assert_eq!(env.snapshot(), before, "{args:?} changed the store");
    }
}

/// `ballast --help` says what the CLI does today: it plans and applies (no "(later)").
#[test]
fn help_says_what_the_cli_does() {
    let output = Env::new().ballast().arg("--help").output().expect("runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let about = help.lines().next().unwrap_or_default();
    assert!(!help.contains("(later)"), "{help}");
    assert!(
        about.contains("plans and applies their AWS resources"),
        "{about}"
    );
    assert!(about.contains("Terraform"), "{about}");
}

/// An `--out` that is no directory (`/dev/null`, a file) is refused before the store or AWS is read, by
/// `update cluster --target terraform` and `toolbox dump` alike, naming the flag and the path once and what to
/// give instead; nothing changes.
#[test]
fn an_out_that_is_no_directory_is_refused_at_once_naming_it_once() {
    let env = Env::with_cluster(NAME, ZONES);
    let file = env.write("plan.tf", "");
    let file = file.display().to_string();
    let before = env.snapshot();
    for (out, kind) in [
        ("/dev/null", "a character device"),
        (file.as_str(), "a regular file"),
    ] {
        for command in [
            vec![
                "update",
                "cluster",
                NAME,
                "--target",
                "terraform",
                "--yes",
                "--out",
                out,
            ],
            vec!["toolbox", "dump", NAME, "--out", out],
        ] {
            let output = env.ballast().args(&command).output().expect("runs");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{command:?}: {stderr}");
            assert!(
                stderr.contains(&format!(
                    "--out {out}: is {kind}, not a directory: give a directory (it is made if missing)"
                )),
                "{command:?}: {stderr}"
            );
            assert_eq!(stderr.matches(out).count(), 1, "{command:?}: {stderr}");
        }
    }
    assert_eq!(env.snapshot(), before);
}

/// `--state-kms-key` (and `BALLAST_STATE_KMS_KEY`) is held to AWS's forms of a KMS key before anything runs: an
/// interpolation or a space is refused as a usage error naming the flag.
#[test]
fn a_state_kms_key_not_in_aws_forms_is_refused() {
    let env = Env::with_cluster(NAME, ZONES);
    for key in ["alias/${file(\"/etc/passwd\")}", "alias/a b", "key/abcd"] {
        env.ballast()
            .args(["get", "clusters", "--state-kms-key", key])
            .assert()
            .code(2)
            .stderr(
                predicate::str::contains("--state-kms-key")
                    .and(predicate::str::contains("is not a key id")),
            );
        env.ballast()
            .env("BALLAST_STATE_KMS_KEY", key)
            .args(["get", "clusters"])
            .assert()
            .code(2);
    }
    env.ballast()
        .args(["get", "clusters", "--state-kms-key", "alias/ballast-state"])
        .assert()
        .success();
}
