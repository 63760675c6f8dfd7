//! The `localcloud` command as an operator uses it: `up` in the background, `env`, `status`, `logs`, `down`,
//! and nothing left running afterwards.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::InstanceType;
use ballast_e2e::localcloud::{
    binaries, endpoint_addr, nodeup_with_env, require_emulator_venv, run_cli,
};
use base64::Engine as _;
use localcloud::process::{group_members, is_listening};
use localcloud::state::StateDir;

/// Runs `localcloud down` when dropped, so a failing test leaves nothing behind either.
struct DownOnDrop(PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = run_cli(&self.0, &["down"]);
    }
}

fn exports(env: &str) -> Vec<(String, String)> {
    env.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect()
}

fn var<'a>(vars: &'a [(String, String)], name: &str) -> &'a str {
    vars.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{name} exported"))
}

async fn wait_booted(state: &StateDir, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(r) = state.read_instance(id) {
            if nodeup::identity::IdentityReport::read(&r.root).is_some() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("instance {id} did not boot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_status_logs_down_and_nothing_is_left_running() {
    require_emulator_venv();
    binaries();
    let dir = tempfile::tempdir().expect("a temp dir");
    let root: &Path = dir.path();
    let _guard = DownOnDrop(root.to_owned());

    // The instance below has no instance profile: nodeup's wait for role credentials (`--credentials-wait`, 60 s
    // by default) is set short, or its boot would be that minute of waiting for a role nothing will associate.
    let scratch = tempfile::tempdir().expect("a temp dir for the nodeup wrapper");
    let nodeup = nodeup_with_env(scratch.path(), &[("NODEUP_CREDENTIALS_WAIT", "2s")]);
    let nodeup = nodeup.to_str().expect("a UTF-8 temp path");
    let (ok, env, err) = run_cli(root, &["up", "--nodeup", nodeup]);
    assert!(ok, "up failed: {err}");
    let vars = exports(&env);
    assert_eq!(var(&vars, "AWS_REGION"), "us-west-2");
    assert_eq!(var(&vars, "BALLAST_NETWORK_CIDR"), "127.16.0.0/16");
    assert!(var(&vars, "AWS_ENDPOINT_URL").starts_with("http://127.0.0.1:"));
    assert!(var(&vars, "AWS_ACCESS_KEY_ID").starts_with("AKIA"));
    // `up` again is a no-op that prints the same environment; `env` prints it too.
    let (ok, again, _) = run_cli(root, &["up"]);
    assert!(ok);
    assert_eq!(exports(&again), vars);
    let (ok, env2, _) = run_cli(root, &["env"]);
    assert!(ok);
    assert_eq!(exports(&env2), vars);

    // Any SDK client with that environment drives it.
    let state = StateDir::new(root);
    let record = state.read_cloud().expect("the cloud's record");
    let ec2 = aws_sdk_ec2::Client::new(&localcloud::aws::sdk_config(
        var(&vars, "AWS_ENDPOINT_URL"),
        "us-west-2",
        &localcloud::state::AccessKey {
            access_key_id: var(&vars, "AWS_ACCESS_KEY_ID").to_owned(),
            secret_access_key: var(&vars, "AWS_SECRET_ACCESS_KEY").to_owned(),
        },
    ));
    let vpc = ec2
        .create_vpc()
        .cidr_block("127.30.0.0/16")
        .send()
        .await
        .expect("CreateVpc");
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("vpc id");
    let subnet = ec2
        .create_subnet()
        .vpc_id(vpc_id)
        .cidr_block("127.30.1.0/24")
        .availability_zone("us-west-2a")
        .send()
        .await
        .expect("CreateSubnet");
    let id = ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(InstanceType::T3Micro)
        .min_count(1)
        .max_count(1)
        .subnet_id(
            subnet
                .subnet()
                .and_then(|s| s.subnet_id())
                .expect("subnet id"),
        )
        .user_data(base64::engine::general_purpose::STANDARD.encode("hi\n"))
        .send()
        .await
        .expect("RunInstances")
        .instances()
        .first()
        .and_then(|i| i.instance_id())
        .expect("an instance")
        .to_owned();
    wait_booted(&state, &id).await;

    let (ok, table, err) = run_cli(root, &["status"]);
    assert!(ok, "status: {err}");
    assert!(
        table.contains(" up ") && table.contains(&id) && table.contains("alive"),
        "{table}"
    );
    let (ok, json, _) = run_cli(root, &["status", "-o", "json"]);
    assert!(ok);
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON status");
    assert_eq!(json["up"], true);
    assert_eq!(json["instances"][0]["instance_id"], id.as_str());
    assert_eq!(json["instances"][0]["nodeup_alive"], true);
    let (ok, logs, _) = run_cli(root, &["logs", &id]);
    assert!(ok);
    assert!(logs.contains("identity written"), "{logs}");
    let (ok, _, err) = run_cli(root, &["logs", "i-nope"]);
    assert!(!ok && err.contains("no instance i-nope"), "{err}");
    // Only machines can be entered: a process instance is refused, by name.
    let (ok, _, err) = run_cli(root, &["exec", &id, "--", "true"]);
    assert!(
        !ok && err.contains(&format!(
            "instance {id} is a process of this host, not a machine"
        )),
        "{err}"
    );

    let instance = state.read_instance(&id).expect("instance record");
    let (ok, _, err) = run_cli(root, &["down"]);
    assert!(ok, "down: {err}");
    assert!(!record.runner.is_alive(), "runner stopped");
    assert!(
        !record.emulator.expect("emulator recorded").is_alive(),
        "emulator stopped"
    );
    assert!(
        group_members(instance.nodeup.expect("nodeup recorded").pid).is_empty(),
        "instance killed"
    );
    assert!(
        !is_listening(record.endpoint.trim_start_matches("http://")),
        "emulator port closed"
    );
    assert!(
        !is_listening(&endpoint_addr(&instance.imds_endpoint).to_string()),
        "IMDS closed"
    );

    // Idempotent, and the state says so.
    let (ok, _, err) = run_cli(root, &["down"]);
    assert!(ok && err.contains("already down"), "{err}");
    let (ok, table, _) = run_cli(root, &["status"]);
    assert!(ok && table.contains(": down"), "{table}");
    let (ok, _, err) = run_cli(root, &["env"]);
    assert!(!ok && err.contains("localcloud up"), "{err}");
}
