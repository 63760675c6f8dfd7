//! `toolbox dump` on a file store, AWS unreachable (a closed loopback port): the dump is written all the same,
//! partial, and what it read from the store is bounded and redacted as a reader must, whatever a node wrote.

mod common;

use common::TempStore;

#[test]
fn a_stored_tail_is_cut_and_redacted_on_read_and_aws_down_makes_the_dump_partial() {
    let name = "dump.example.com";
    let store = TempStore::with_cluster(name, "us-west-2a");
    // A tail as a node could write it by hand: a 4 KiB line and a credential, never cut or redacted.
    let logs = store.store_dir().join(name).join("logs");
    std::fs::create_dir_all(&logs).expect("logs dir");
    let tail = serde_json::json!({
        "instanceId": "i-0123456789abcdef0",
        "reason": "boot-failed",
        "publishedAt": "2026-12-02T16:00:00Z",
        "publishedUnix": 1_796_227_200_i64,
        "nodeup": ["x".repeat(4096), "connecting to postgres://app:hunter22@db.internal/app".to_string()],
    });
    std::fs::write(
        logs.join("AROAEXAMPLE:i-0123456789abcdef0.json"),
        serde_json::to_vec(&tail).expect("json"),
    )
    .expect("write the tail");

    let output = store
        .ballast()
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
        )
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .timeout(std::time::Duration::from_secs(300))
        .args(["toolbox", "dump", name, "--log-wait", "0s", "-o", "json"])
        .output()
        .expect("ballast runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Partial (AWS did not answer), written all the same.
    assert_eq!(output.status.code(), Some(7), "{stderr}");
    let dump: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON document");
    let missing = dump["index"]["missing"].to_string();
    assert!(missing.contains("cloud: instances"), "{missing}");
    let lines = &dump["logs"]["tails"][0]["nodeup"];
    let first = lines[0].as_str().expect("a line");
    assert!(first.ends_with("[cut at 1024 bytes]"), "{first:.80}");
    assert!(first.len() < 1100, "{}", first.len());
    assert_eq!(
        lines[1],
        "connecting to postgres://app:[redacted]@db.internal/app"
    );
    // The spec is there: a store part did not wait for AWS.
    assert!(
        dump["spec"]["cluster"][0]["metadata"]["name"] == name,
        "{}",
        dump["spec"]
    );
}
