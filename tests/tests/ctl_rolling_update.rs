//! `ballast rolling-update cluster` end to end on the local cloud with IAM enforced: a Kubernetes upgrade of 3
//! control-plane groups and a node group of 10 (the default release to the next minor, both AMIs registered)
//! with termination handling on (`spec.terminationHandling`: the `ballast-termination` hook on every group holds each terminated instance in
//! `Terminating:Wait`), killed with SIGKILL during the control plane and again during the nodes, then finished by a
//! third run (the nodes at the default pace, a quarter of the group at a time), while a watcher polls etcd and a
//! client writes to it throughout. Every instance the roll terminated waited on the hook and had its action
//! completed by the roll (well within the hook's 300 s heartbeat; nothing
//! else completes actions here: no event reaches the queue); each control-plane member was stopped by its own node
//! on the roll's stop request before its instance went; etcd never fell below quorum, and its term rose only by
//! the handoffs the stopped leaders logged (no election). Refusals (etcd missing a member, an unknown group, an
//! unpinned version, a downgrade) change nothing; `--instance-group nodes` rolls only that group. One cluster for
//! all of it. The control-plane instances' audit logs (written by the test as the API server writes them) are all
//! in S3 after the roll. No Kubernetes API runs here: every roll is `--cloudonly` (the drain is tested against a
//! local fake API server in ctl's unit tests).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_e2e::cluster_etcd::{connect, control_plane, wait_for_settled, watch_quorum};
use ballast_e2e::etcd_writer::{write_until_stopped, WriterControl};
use ballast_e2e::localcloud::{lifecycle_actions, nodeup_with_env, LocalCloud, Options};
use ballast_e2e::operator::{ballast_cli_on, enable_termination_handling, STATE};
use ballast_e2e::wait::wait_until;
use sha2::{Digest, Sha256};

const CLUSTER: &str = "roll.example.com";
const BUCKET: &str = "ballast-state";
const OLD: &str = ballast_e2e::lifecycle::FROM_VERSION;
const NEW: &str = ballast_e2e::lifecycle::TO_VERSION;
const SETTLE: Duration = Duration::from_secs(180);
const MARKER_TAG: &str = "ballast.dev/rolling-update";
const NODES: usize = 10;

/// A roll as a child process, to be killed; its progress (stderr) appended to `log`.
fn spawn_roll(cloud: &LocalCloud, log: &std::path::Path) -> std::process::Child {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("the rolls' log");
    std::process::Command::new(&ballast_e2e::localcloud::binaries().ballast)
        .env_clear()
        .envs(cloud.operator_env(STATE))
        .args(["rolling-update", "cluster", CLUSTER, "--yes", "--cloudonly"])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawning ballast rolling-update")
}

/// For each instance whose lifecycle action was seen waiting, how long it was seen waiting (first seen to first
/// seen gone, at this poll's resolution; `None`: still waiting when told to stop). A thread of its own: the
/// emulator's HTTP helper blocks.
fn watch_lifecycle_actions(
    cloud: &LocalCloud,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<BTreeMap<String, Option<Duration>>> {
    let endpoint = cloud.record.endpoint.clone();
    std::thread::spawn(move || {
        let mut seen: BTreeMap<String, (Instant, Option<Duration>)> = BTreeMap::new();
        loop {
            // One listing more once asked to stop: an action the roll completed just before it ended is then
            // seen gone rather than left unresolved by the last sample.
            let stopping = stop.load(Ordering::Relaxed);
            if let Some(listed) = lifecycle_actions(&endpoint) {
                let pending: BTreeSet<String> = listed.into_iter().map(|(id, _)| id).collect();
                for id in &pending {
                    seen.entry(id.clone()).or_insert((Instant::now(), None));
                }
                for (id, (since, gone)) in seen.iter_mut() {
                    if gone.is_none() && !pending.contains(id) {
                        *gone = Some(since.elapsed());
                    }
                }
            }
            if stopping {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        seen.into_iter().map(|(id, (_, gone))| (id, gone)).collect()
    })
}

/// The handoffs control-plane nodes logged when they stopped their member on the roll's stop request: the new
/// leader's member ID, per instance.
fn handoffs_on_roll_requests(cloud: &LocalCloud, ids: &BTreeSet<String>) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    for id in ids {
        let log = std::fs::read_to_string(cloud.instance(id).log).unwrap_or_default();
        let Some(line) = log
            .lines()
            .find(|l| l.contains("etcd stopped on a stop request") && l.contains("rolling-update"))
        else {
            continue;
        };
        if let Some(to) = line
            .split("handed over to ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_hexdigit()).next())
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        {
            found.insert(id.clone(), to);
        }
    }
    found
}

/// Every instance of the cluster EC2 knows: id -> (state, group, node-spec hash).
async fn instances(cloud: &LocalCloud) -> BTreeMap<String, (String, String, String)> {
    let out = cloud
        .ec2()
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:ballast.dev/cluster")
                .values(CLUSTER)
                .build(),
        )
        .send()
        .await
        .expect("DescribeInstances");
    let mut found = BTreeMap::new();
    for i in out.reservations().iter().flat_map(|r| r.instances()) {
        let tag = |k: &str| {
            i.tags()
                .iter()
                .find(|t| t.key() == Some(k))
                .and_then(|t| t.value())
                .unwrap_or("")
                .to_string()
        };
        found.insert(
            i.instance_id().unwrap_or_default().to_string(),
            (
                i.state()
                    .and_then(|s| s.name())
                    .map_or("?", |n| n.as_str())
                    .to_string(),
                tag("ballast.dev/instance-group"),
                tag("ballast.dev/node-spec-hash"),
            ),
        );
    }
    found
}

fn running(all: &BTreeMap<String, (String, String, String)>) -> BTreeSet<String> {
    all.iter()
        .filter(|(_, (state, _, _))| state == "running" || state == "pending")
        .map(|(id, _)| id.clone())
        .collect()
}

/// Each group's Auto Scaling Group: (min, max, desired, has the roll's marker).
async fn group_sizes(cloud: &LocalCloud) -> BTreeMap<String, (i32, i32, i32, bool)> {
    let out = cloud
        .autoscaling()
        .describe_auto_scaling_groups()
        .send()
        .await
        .expect("DescribeAutoScalingGroups");
    out.auto_scaling_groups()
        .iter()
        .filter(|g| {
            g.auto_scaling_group_name()
                .is_some_and(|n| n.ends_with(CLUSTER))
        })
        .map(|g| {
            (
                g.auto_scaling_group_name().unwrap_or_default().to_string(),
                (
                    g.min_size().unwrap_or(-1),
                    g.max_size().unwrap_or(-1),
                    g.desired_capacity().unwrap_or(-1),
                    g.tags().iter().any(|t| t.key() == Some(MARKER_TAG)),
                ),
            )
        })
        .collect()
}

/// The cluster's spec as stored, with the Kubernetes version replaced; `replace -f` of it.
fn replace_version(
    cloud: &LocalCloud,
    dir: &tempfile::TempDir,
    from: &str,
    to: &str,
) -> std::process::Output {
    let stored = ballast_cli_on(cloud, CLUSTER)
        .args(["get", "clusters", CLUSTER, "-o", "yaml"])
        .output()
        .expect("get clusters");
    let yaml = String::from_utf8_lossy(&stored.stdout).replace(
        &format!("kubernetesVersion: {from}"),
        &format!("kubernetesVersion: {to}"),
    );
    assert!(yaml.contains(&format!("kubernetesVersion: {to}")), "{yaml}");
    let path = dir.path().join("cluster.yaml");
    std::fs::write(&path, yaml).expect("write");
    ballast_cli_on(cloud, CLUSTER)
        .args(["replace", "-f"])
        .arg(&path)
        .output()
        .expect("replace")
}

fn stored_version(cloud: &LocalCloud) -> String {
    let out = ballast_cli_on(cloud, CLUSTER)
        .args(["get", "clusters", CLUSTER, "-o", "yaml"])
        .output()
        .expect("get clusters");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("kubernetesVersion: "))
        .unwrap_or_default()
        .to_string()
}

/// Waits until `validate cluster`'s etcd check passes (the supervisors' published health, which the roll's gate
/// reads): the other checks fail while instances are out of date.
async fn wait_for_published_etcd_health(cloud: &LocalCloud) {
    wait_until(SETTLE, "etcd's published health to pass", || async move {
        let out = ballast_cli_on(cloud, CLUSTER)
            .args(["validate", "cluster", "-o", "json"])
            .output()
            .expect("validate");
        let checks: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let etcd_ok = checks["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"] == "etcd" && c["ok"] == true);
        if etcd_ok {
            Ok(())
        } else {
            Err(checks)
        }
    })
    .await
}

/// Runs `roll` and SIGKILLs it once `reached` holds for what EC2 shows; panics if it ends first.
async fn kill_when(
    cloud: &LocalCloud,
    log: &std::path::Path,
    what: &str,
    reached: impl Fn(&BTreeMap<String, (String, String, String)>) -> bool,
) {
    let mut child = spawn_roll(cloud, log);
    let reached = &reached;
    wait_until(
        Duration::from_secs(300),
        &format!("the roll to reach {what}"),
        || {
            let ended = child.try_wait().expect("try_wait");
            async move {
                if let Some(status) = ended {
                    panic!("the roll ended ({status}) before {what}");
                }
                reached(&instances(cloud).await)
            }
        },
    )
    .await;
    child.kill().expect("SIGKILL the roll");
    let status = child.wait().expect("wait");
    eprintln!("killed the roll ({status}) {what}");
}

/// Appends `count` audit events to the instance's API server audit log (`/var/log/kubernetes/audit.log` under its
/// root), one write per JSON line as the API server writes them; returns the bytes written.
fn write_audit_events(root: &std::path::Path, instance_id: &str, count: usize) -> Vec<u8> {
    use std::io::Write;
    let dir = root.join("var/log/kubernetes");
    std::fs::create_dir_all(&dir).expect("the audit log's directory");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("audit.log"))
        .expect("the audit log");
    let mut written = Vec::new();
    for i in 0..count {
        let line = format!(
            "{{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"level\":\"Metadata\",\
             \"auditID\":\"{instance_id}-{i:04}\",\"stage\":\"ResponseComplete\",\
             \"requestURI\":\"/api/v1/namespaces/default/configmaps/c{i}\",\"verb\":\"get\",\
             \"user\":{{\"username\":\"system:admin\"}},\"responseStatus\":{{\"code\":200}}}}\n"
        );
        file.write_all(line.as_bytes()).expect("an audit event");
        written.extend_from_slice(line.as_bytes());
    }
    file.sync_all().expect("fsync the audit log");
    written
}

/// One instance's shipped audit log: its chunks in the state store, under its writer's prefix (the control-plane
/// role session's `aws:userid`, `<role-id>:<instance-id>`), concatenated in key order.
async fn shipped_audit_log(cloud: &LocalCloud, instance_id: &str) -> Vec<u8> {
    let role = cloud
        .iam()
        .get_role()
        .role_name(format!("control-plane.{CLUSTER}"))
        .send()
        .await
        .expect("GetRole of the control-plane role");
    let writer = format!("{}:{instance_id}", role.role().expect("the role").role_id());
    let prefix = format!("clusters/{CLUSTER}/audit/{writer}/");
    let listed = cloud
        .s3()
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(&prefix)
        .send()
        .await
        .expect("ListObjectsV2 of the audit chunks");
    let mut keys: Vec<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect();
    keys.sort();
    let mut log = Vec::new();
    for key in keys {
        log.extend(cloud.s3_object(BUCKET, &key).await.expect("an audit chunk"));
    }
    log
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_rolls_every_instance_once_through_kills_and_keeps_etcd_whole() {
    // Control-plane nodes republish the bootstrap directory every 2 s rather than every minute (below).
    let wrapper_dir = tempfile::tempdir().expect("a temp dir for the nodeup wrapper");
    let cloud = LocalCloud::start_with(Options {
        nodeup: Some(nodeup_with_env(
            wrapper_dir.path(),
            &[("NODEUP_BOOTSTRAP_REPUBLISH_EVERY", "2s")],
        )),
        ..Options::default()
    });
    cloud.prepare_for_ballast(BUCKET).await;
    cloud.register_upgrade_release_image(NEW).await;
    let dir = tempfile::tempdir().expect("tempdir");
    ballast_cli_on(&cloud, CLUSTER)
        .args([
            "create",
            "cluster",
            "--name",
            CLUSTER,
            "--zones",
            "us-west-2a,us-west-2b,us-west-2c",
            "--node-count",
            &NODES.to_string(),
            "--kubernetes-version",
            OLD,
        ])
        .assert()
        .success();
    // Termination handling on (the queue, its rules, the hook on every group, the handler on the control plane),
    // then the cluster made.
    enable_termination_handling(&cloud, CLUSTER, dir.path());
    ballast_cli_on(&cloud, CLUSTER)
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    ballast_cli_on(&cloud, CLUSTER)
        .args(["validate", "cluster", "--wait", "5m"])
        .assert()
        .success();
    let sizes_before = group_sizes(&cloud).await;
    assert_eq!(sizes_before.len(), 4, "{sizes_before:?}");

    // Bad input: a version the manifest does not pin changes nothing.
    let refused = replace_version(&cloud, &dir, OLD, "1.37.99");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("spec.kubernetesVersion") && stderr.contains("pins"),
        "{stderr}"
    );
    assert_eq!(stored_version(&cloud), OLD);

    // The upgrade: the spec, then update cluster; every instance is now out of date.
    let upgraded = replace_version(&cloud, &dir, OLD, NEW);
    assert!(
        upgraded.status.success(),
        "{}",
        String::from_utf8_lossy(&upgraded.stderr)
    );
    ballast_cli_on(&cloud, CLUSTER)
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let originals = instances(&cloud).await;
    let original_running = running(&originals);
    assert_eq!(original_running.len(), 3 + NODES);

    // Without --yes: the table of what needs replacing and why; nothing changes.
    let planned = ballast_cli_on(&cloud, CLUSTER)
        .args(["rolling-update", "cluster"])
        .output()
        .expect("plan");
    assert!(planned.status.success());
    let table = String::from_utf8_lossy(&planned.stdout);
    for id in &original_running {
        assert!(table.contains(id.as_str()), "{id} missing from\n{table}");
    }
    assert!(table.contains("node spec changed"), "{table}");
    assert!(
        String::from_utf8_lossy(&planned.stderr).contains(
            "control-plane-us-west-2a, control-plane-us-west-2b, control-plane-us-west-2c, nodes"
        ),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );

    // Bad input: an unknown group.
    let unknown = ballast_cli_on(&cloud, CLUSTER)
        .args([
            "rolling-update",
            "cluster",
            "--instance-group",
            "nope",
            "--yes",
            "--cloudonly",
        ])
        .output()
        .expect("unknown group");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no instance group named nope"));
    assert_eq!(
        running(&instances(&cloud).await),
        original_running,
        "nothing terminated"
    );

    // etcd missing a member: the roll is refused and terminates nothing.
    let victim = control_plane(&cloud)[0].instance_id.clone();
    cloud
        .ec2()
        .terminate_instances()
        .instance_ids(&victim)
        .send()
        .await
        .expect("TerminateInstances");
    let refused = ballast_cli_on(&cloud, CLUSTER)
        .args(["rolling-update", "cluster", "--yes", "--cloudonly"])
        .output()
        .expect("refused roll");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("etcd is missing a member") && stderr.contains("Nothing was terminated"),
        "{stderr}"
    );
    let after_refusal = instances(&cloud).await;
    let survivors: BTreeSet<String> = original_running
        .iter()
        .filter(|i| **i != victim)
        .cloned()
        .collect();
    assert!(
        survivors.is_subset(&running(&after_refusal)),
        "the refused roll terminated something"
    );
    wait_for_settled(&cloud, 3, SETTLE).await;
    wait_for_published_etcd_health(&cloud).await;

    // The roll, with a watcher and a writer on etcd throughout: killed during the control plane, again during
    // the nodes, then run to the end.
    let before_roll = running(&instances(&cloud).await);
    let outdated: BTreeSet<String> = before_roll
        .iter()
        .filter(|i| **i != victim)
        .filter(|i| originals.contains_key(*i))
        .cloned()
        .collect();
    assert_eq!(outdated.len(), 2 + NODES);
    // The API server's audit log, as it writes it (no kube-apiserver runs here): lines appended to each outdated
    // control-plane instance's log. Their shippers flush them to S3 when the roll's graceful termination stops
    // nodeup, whatever their chunk interval (30 s by default); checked after the roll (docs/audit.md).
    let audit_written: BTreeMap<String, Vec<u8>> = control_plane(&cloud)
        .into_iter()
        .filter(|r| outdated.contains(&r.instance_id))
        .map(|r| {
            let log = write_audit_events(&r.root, &r.instance_id, 40);
            (r.instance_id, log)
        })
        .collect();
    assert_eq!(
        audit_written.len(),
        2,
        "the two outdated control-plane instances"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writer = WriterControl::new();
    let roll_log = dir.path().join("rolls.log");
    let roll_started = Instant::now();
    let lifecycle = watch_lifecycle_actions(&cloud, stop.clone());
    // A leader the roll replaces hands leadership away on the roll's stop request (the term one higher, the new
    // leader the one it names); an election (a term with no leader known, or a leader no handoff named) fails
    // the test below. Leaderless samples are still counted apart.
    let (quorum, written, final_roll) = tokio::join!(
        watch_quorum(&cloud, &stop, Duration::from_millis(300)),
        // Paced: a steady load through the roll, not a flood that starves the watcher on a 2-core machine.
        write_until_stopped(&writer, "roll/", Duration::from_millis(20), || connect(
            &cloud
        )),
        async {
            let cp_gone = |all: &BTreeMap<String, (String, String, String)>| {
                outdated.iter().any(|id| {
                    all.get(id).is_some_and(|(state, group, _)| {
                        group.starts_with("control-plane") && state != "running"
                    })
                })
            };
            kill_when(&cloud, &roll_log, "during the control plane", cp_gone).await;
            let node_gone = |all: &BTreeMap<String, (String, String, String)>| {
                outdated.iter().any(|id| {
                    all.get(id)
                        .is_some_and(|(state, group, _)| group == "nodes" && state != "running")
                })
            };
            kill_when(&cloud, &roll_log, "during the nodes", node_gone).await;
            let sizes = group_sizes(&cloud).await;
            assert!(
                sizes.get(&format!("nodes.{CLUSTER}")).is_some_and(|s| s.3),
                "the killed roll left its marker: {sizes:?}"
            );
            let finished = ballast_cli_on(&cloud, CLUSTER)
                .args(["rolling-update", "cluster", "--yes", "--cloudonly"])
                .assert()
                .success();
            stop.store(true, Ordering::Relaxed);
            writer.stop();
            String::from_utf8_lossy(&finished.get_output().stderr).into_owned()
        }
    );
    let waited = lifecycle.join().expect("the lifecycle watcher");
    let rolls = format!(
        "{}{final_roll}",
        std::fs::read_to_string(&roll_log).unwrap_or_default()
    );
    eprintln!("the rolls' progress:\n{rolls}");
    let (samples, fewest, leaderless) = (quorum.samples, quorum.fewest(), quorum.leaderless);
    eprintln!(
        "roll with two kills: {:?}; etcd samples {samples}, fewest voters answering {fewest}, {leaderless} samples during an election; writer {} acknowledged, {} failed",
        roll_started.elapsed(),
        written.acknowledged.len(),
        written.failures
    );
    assert!(samples > 10, "the watcher hardly sampled");
    // Elections are brief: most samples see a leader (a cluster stuck leaderless would fail this).
    assert!(
        leaderless * 2 < samples,
        "no leader in {leaderless} of {samples} samples"
    );
    assert!(
        fewest >= 2,
        "etcd's voters fell below quorum: {fewest} of 3 answering ({:?})",
        quorum.worst
    );
    let mut client = connect(&cloud).await.expect("client");
    written.assert_none_lost(&mut client, 11).await;

    // Through the hook: every instance the roll terminated waited in Terminating:Wait and the roll completed its
    // action (the roll calls CompleteLifecycleAction only for instances it sees waiting, and says "completed" only
    // when Auto Scaling took the completion); every action the watcher saw waiting (at 50 ms, it catches the
    // control-plane ones, held while their members stop) went long before the hook's 300 s heartbeat; none waits
    // now. Nothing else completes actions here: no event reaches the cluster's queue on the local cloud.
    eprintln!("lifecycle actions seen waiting, and for how long: {waited:?}");
    for id in &outdated {
        // A roll says so once Auto Scaling took the completion; a roll killed in between (the kills land as soon
        // as EC2 shows an instance leaving `running`, which the completion itself causes) had no time to say it,
        // and then the watcher saw the action waiting and gone: nothing but a roll completes actions here.
        assert!(
            rolls.contains(&format!("{id}: lifecycle action completed"))
                || waited.get(id).is_some_and(Option::is_some),
            "the roll did not complete {id}'s action (seen waiting: {:?})",
            waited.get(id)
        );
    }
    for (id, held) in &waited {
        assert!(
            outdated.contains(id),
            "{id} was held by the hook, and not the roll's"
        );
        assert!(
            held.is_some_and(|d| d < Duration::from_secs(60)),
            "{id}'s action waited {held:?}"
        );
    }
    assert_eq!(
        lifecycle_actions(&cloud.record.endpoint),
        Some(Vec::new()),
        "actions left waiting"
    );
    // Each control-plane member was stopped by its own node on the roll's stop request before its instance went.
    let rolled_control_plane: BTreeSet<String> = outdated
        .iter()
        .filter(|id| {
            originals
                .get(*id)
                .is_some_and(|(_, g, _)| g.starts_with("control-plane"))
        })
        .cloned()
        .collect();
    assert_eq!(rolled_control_plane.len(), 2);
    for id in &rolled_control_plane {
        assert!(
            waited.contains_key(id),
            "{id} was never seen waiting on its lifecycle hook: {waited:?}"
        );
        let log = std::fs::read_to_string(cloud.instance(id).log).unwrap_or_default();
        assert!(
            log.lines()
                .any(|l| l.contains("etcd stopped on a stop request")
                    && l.contains("rolling-update")),
            "{id}'s nodeup did not stop etcd on the roll's request:\n{log}"
        );
        assert!(
            rolls.contains(&format!("{id}: etcd member stopped (")),
            "the roll did not see {id}'s answer"
        );
    }
    // No leadership change but by a handoff: each term after the first is one higher than the one before, and its
    // leader is the member a stopped leader handed over to on the roll's request.
    let handoffs = handoffs_on_roll_requests(&cloud, &rolled_control_plane);
    let mut terms: Vec<(u64, u64)> = Vec::new();
    for &(term, leader) in &quorum.leadership {
        match terms.last_mut() {
            Some(last) if last.0 == term => {
                if leader != 0 {
                    last.1 = leader;
                }
            }
            _ => terms.push((term, leader)),
        }
    }
    eprintln!(
        "etcd's terms and leaders seen: {:?}; handoffs on the roll's requests: {handoffs:x?}",
        terms
            .iter()
            .map(|(t, l)| format!("{t}:{l:x}"))
            .collect::<Vec<_>>()
    );
    for pair in terms.windows(2) {
        let ((before, old), (after, new)) = (pair[0], pair[1]);
        assert_eq!(
            after,
            before + 1,
            "term {before} -> {after}: an election ({terms:x?})"
        );
        assert!(
            new != 0 && new != old && handoffs.values().any(|to| *to == new),
            "term {after}'s leader {new:x} was handed no leadership by the roll ({handoffs:x?}, {terms:x?})"
        );
    }
    assert!(
        terms.len() - 1 <= handoffs.len(),
        "more leadership changes than handoffs: {terms:x?}, {handoffs:x?}"
    );

    // Every outdated instance replaced exactly once: each terminated, as many launched, none of those gone.
    let after = instances(&cloud).await;
    let now_running = running(&after);
    let terminated: BTreeSet<String> = before_roll.difference(&now_running).cloned().collect();
    let launched: BTreeSet<String> = now_running.difference(&before_roll).cloned().collect();
    assert_eq!(terminated, outdated, "terminated by the roll");
    assert_eq!(
        launched.len(),
        outdated.len(),
        "one launch per replaced instance: {launched:?}"
    );
    // Launched during the roll and gone again would be an instance replaced twice.
    let replaced_twice: Vec<&String> = after
        .iter()
        .filter(|(id, (state, _, _))| {
            !before_roll.contains(*id) && state != "running" && state != "pending"
        })
        .filter(|(id, _)| !originals.contains_key(*id))
        .map(|(id, _)| id)
        .collect();
    assert!(
        replaced_twice.is_empty(),
        "instances launched by the roll were terminated: {replaced_twice:?}"
    );
    assert_eq!(
        group_sizes(&cloud).await,
        sizes_before,
        "sizes back, no marker left"
    );

    // update cluster --yes set the audit chunks' retention on the state bucket (365 days by default).
    let rule_id = format!("ballast-audit-{CLUSTER}");
    let rules = cloud
        .s3()
        .get_bucket_lifecycle_configuration()
        .bucket(BUCKET)
        .send()
        .await
        .expect("GetBucketLifecycleConfiguration");
    let rule = rules
        .rules()
        .iter()
        .find(|r| r.id() == Some(rule_id.as_str()))
        .unwrap_or_else(|| panic!("no audit retention rule: {:?}", rules.rules()));
    assert_eq!(
        rule.expiration().and_then(|e| e.days()),
        Some(365),
        "{rule:?}"
    );
    // Nothing of the audit log lost across the graceful roll: each replaced control-plane instance's chunks, in key
    // order, are exactly the lines written to its log.
    for (id, written) in &audit_written {
        let shipped = shipped_audit_log(&cloud, id).await;
        assert!(
            shipped == *written,
            "{id}: {} bytes shipped, {} written; the shipped log:\n{}",
            shipped.len(),
            written.len(),
            String::from_utf8_lossy(&shipped)
        );
    }

    // Every report names its group's new node spec, which is the new version's.
    for group in [
        "control-plane-us-west-2a",
        "control-plane-us-west-2b",
        "control-plane-us-west-2c",
        "nodes",
    ] {
        let spec = &cloud
            .s3_text(
                BUCKET,
                &format!("clusters/{CLUSTER}/nodes/{group}/spec.yaml"),
            )
            .await;
        assert!(
            spec.contains(NEW),
            "{group}'s node spec is not {NEW}:\n{spec}"
        );
        let hash = hex::encode(Sha256::digest(spec.as_bytes()));
        for (id, (_, g, tag)) in after.iter().filter(|(id, _)| now_running.contains(*id)) {
            if g != group {
                continue;
            }
            assert_eq!(tag, &hash, "{id}'s launch tag");
            let report = cloud
                .stored_report(BUCKET, "clusters/", CLUSTER, id)
                .await
                .unwrap_or_else(|| panic!("{id} has no boot report"))
                .report;
            assert_eq!(
                report.node_spec_sha256.as_deref(),
                Some(hash.as_str()),
                "{id}'s report"
            );
            assert_eq!(
                report.phase,
                ballast_state::report::Phase::Configured,
                "{id}'s report"
            );
        }
    }
    ballast_cli_on(&cloud, CLUSTER)
        .args(["validate", "cluster"])
        .assert()
        .success();

    // Nothing left to do.
    let again = ballast_cli_on(&cloud, CLUSTER)
        .args(["rolling-update", "cluster", "--yes", "--cloudonly"])
        .output()
        .expect("second roll");
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("No rolling update is needed"));
    assert_eq!(running(&instances(&cloud).await), now_running);

    // A downgrade is refused and changes nothing.
    let down = replace_version(&cloud, &dir, NEW, OLD);
    assert!(!down.status.success());
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("cannot be downgraded"),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(stored_version(&cloud), NEW);

    // --instance-group nodes rolls that group only (forced: nothing else is out of date).
    let control_plane_before: BTreeSet<String> = now_running
        .iter()
        .filter(|id| {
            after
                .get(*id)
                .is_some_and(|(_, g, _)| g.starts_with("control-plane"))
        })
        .cloned()
        .collect();
    let forced = ballast_cli_on(&cloud, CLUSTER)
        .args([
            "rolling-update",
            "cluster",
            "--instance-group",
            "nodes",
            "--force",
            "--yes",
            "--cloudonly",
        ])
        .assert()
        .success();
    // At the default pace, a surge of a quarter of the group (3 of 10, rounded up): batches of 3, the last one
    // what is left, each batch's instances terminated together and replaced in one wait.
    let forced_log = String::from_utf8_lossy(&forced.get_output().stderr).into_owned();
    let batches: Vec<usize> = forced_log
        .lines()
        .filter_map(|l| l.split_once("] nodes: "))
        .filter_map(|(_, rest)| rest.split_once(" replaced in "))
        .map(|(ids, _)| ids.split(", ").count())
        .collect();
    assert_eq!(
        batches,
        [3, 3, 3, 1],
        "the forced roll's batches:\n{forced_log}"
    );
    let final_state = instances(&cloud).await;
    let final_running = running(&final_state);
    assert!(
        control_plane_before.is_subset(&final_running),
        "a control-plane instance was replaced"
    );
    let nodes_before: BTreeSet<&String> = now_running
        .iter()
        .filter(|id| !control_plane_before.contains(*id))
        .collect();
    assert_eq!(nodes_before.len(), NODES);
    assert!(
        nodes_before.iter().all(|id| !final_running.contains(*id)),
        "every node replaced"
    );
    assert_eq!(final_running.len(), 3 + NODES);
    assert_eq!(group_sizes(&cloud).await, sizes_before);
    ballast_cli_on(&cloud, CLUSTER)
        .args(["validate", "cluster", "--wait", "2m"])
        .assert()
        .success();

    // Where workers find the bootstrap service comes to name the running control plane and no replaced instance.
    // A replacement drops, when it publishes its own entry, those of instances EC2 no longer runs; with the hooks
    // the instance it replaced may still be running in EC2 then (held in Terminating:Wait until the roll completes
    // its action), so the control plane's periodic republish (2 s here, a minute by default) drops it.
    let key = format!("clusters/{CLUSTER}/control-plane/node-bootstrap.json");
    let listed = || async {
        let published = cloud
            .s3_object(BUCKET, &key)
            .await
            .expect("the published services");
        let published: ballast_state::node_bootstrap::NodeBootstrapServices =
            serde_json::from_slice(&published).expect("JSON");
        published
            .services
            .into_iter()
            .map(|s| s.instance_id)
            .collect::<BTreeSet<String>>()
    };
    wait_until(
        Duration::from_secs(30),
        "the bootstrap directory to list exactly the running control plane",
        || async { listed().await == control_plane_before },
    )
    .await;
}
