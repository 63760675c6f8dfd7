//! `ballast etcd ...` and `validate cluster` end to end: the real binary against a file state store in a temp
//! dir. What the etcd supervisors would write (backups, health reports, `etcd/cluster.json`) is written here
//! directly into the store's layout, well-formed by construction (the supervisors' own types).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use ballast_state::digest::sha256_hex;
use ballast_state::etcd::backup::{backup_id, BackupMetadata};
use ballast_state::etcd::health::HealthReport;
use ballast_state::etcd::record::{ClusterRecord, Origin};
use ballast_state::layout::ClusterPaths;
use ballast_state::timestamp::rfc3339;
use predicates::prelude::*;

const NAME: &str = "demo.example.com";
const ZONES: &str = "us-west-2a,us-west-2b,us-west-2c";

struct Env {
    store: common::TempStore,
    paths: ClusterPaths,
}

impl Env {
    /// A temp dir with a file state store holding cluster [`NAME`] (three control-plane groups).
    fn with_cluster() -> Self {
        Env {
            store: common::TempStore::with_cluster(NAME, ZONES),
            paths: ClusterPaths::new(NAME),
        }
    }

    fn store_dir(&self) -> PathBuf {
        self.store.store_dir()
    }

    fn ballast(&self) -> Command {
        self.store.ballast()
    }

    fn path(&self, key: &str) -> PathBuf {
        self.store_dir().join(key)
    }

    /// Writes an object as the store does: whole, by a rename, owner-only.
    fn put(&self, key: &str, data: &[u8]) {
        let path = self.path(key);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let tmp = self.store.dir.path().join("object.tmp");
        std::fs::write(&tmp, data).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
    }

    fn put_json<T: serde::Serialize>(&self, key: &str, value: &T) {
        self.put(
            key,
            &serde_json::to_vec_pretty(value).expect("serializable"),
        );
    }

    fn read(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(key)).ok()
    }

    /// A backup as the leader's supervisor stores it: the snapshot, then its metadata. `created_unix` is its
    /// time; its id is made from it (plus `ms` milliseconds, to tell backups of the same second apart).
    fn put_backup(&self, created_unix: i64, ms: i64, snapshot: &[u8]) -> BackupMetadata {
        let at = time::OffsetDateTime::from_unix_timestamp(created_unix).expect("time")
            + time::Duration::milliseconds(ms);
        let metadata = BackupMetadata {
            id: backup_id(at),
            created_at: rfc3339(at),
            created_unix,
            revision: 4200 + ms,
            sha256: sha256_hex(snapshot),
            size: snapshot.len() as u64,
            member_count: 3,
            epoch: 1,
            taken_by: "i-0leader".to_string(),
        };
        let prefix = self.paths.etcd_backup(&metadata.id);
        self.put(&format!("{prefix}snapshot.db"), snapshot);
        self.put_json(&format!("{prefix}metadata.json"), &metadata);
        metadata
    }

    /// `etcd/cluster.json` of a bootstrapped cluster at epoch 1.
    fn put_record(&self) -> Vec<u8> {
        self.put_json(
            &self.paths.etcd_cluster(),
            &ClusterRecord {
                epoch: 1,
                origin: Origin::Bootstrap,
                seed: Some("i-0leader".to_string()),
                decided_at: "2025-01-01T00:00:00Z".to_string(),
                decided_by: "instance i-0leader".to_string(),
            },
        );
        self.read(&self.paths.etcd_cluster()).expect("record")
    }

    /// A member's published health, `age` seconds old.
    fn put_health(&self, instance: &str, healthy: bool, leader: bool, age: i64) {
        let report = HealthReport {
            instance_id: instance.to_string(),
            peer_url: "https://10.0.0.1:2380".to_string(),
            client_url: "https://10.0.0.1:2379".to_string(),
            updated_at: "2025-01-01T00:00:00Z".to_string(),
            updated_unix: now() - age,
            local_epoch: Some(1),
            running: healthy,
            member_id: Some("8e9e05c52164694d".to_string()),
            is_learner: false,
            is_leader: leader,
            raft_index: 1234,
            cluster_healthy: healthy,
            voting_members: vec!["i-0leader".into(), "i-0b".into(), "i-0c".into()],
            learners: vec![],
            last_step: "steady".to_string(),
            last_error: (!healthy).then(|| "etcd does not answer".to_string()),
        };
        let key = format!("{}etcd/health/{instance}.json", self.paths.prefix());
        self.put_json(&key, &report);
        // The store dates the report too (its mtime, as S3 its LastModified): the same age by its clock.
        self.set_store_time(&key, now() - age);
    }

    /// Sets the time the store gives an object (a file store's mtime), as if it had been written then.
    fn set_store_time(&self, key: &str, unix: i64) {
        let file = std::fs::File::options()
            .write(true)
            .open(self.path(key))
            .expect("open object");
        let at = std::time::UNIX_EPOCH + Duration::from_secs(unix as u64);
        file.set_modified(at).expect("set mtime");
    }

    /// Every file of the store with its content: what "changes nothing" is checked against.
    fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        self.store.snapshot()
    }
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn stdout_of(assert: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(assert.get_output().stdout.clone()).expect("utf8")
}

#[test]
fn list_backups_as_a_table_and_as_json() {
    let env = Env::with_cluster();
    env.ballast()
        .args(["etcd", "list-backups", NAME])
        .assert()
        .success()
        .stdout("ID   CREATED   REVISION   SIZE   MEMBERS   EPOCH   TAKEN BY\n")
        .stderr(predicate::str::contains(
            "No etcd backups of demo.example.com",
        ));
    env.ballast()
        .args(["etcd", "list-backups", NAME, "-o", "json"])
        .assert()
        .success()
        .stdout("[]\n");

    let older = env.put_backup(1_735_787_045, 678, &[1u8; 20 * 1024]);
    let newer = env.put_backup(1_735_790_645, 0, &[2u8; 300]);
    assert_eq!(older.id, "20250102T030405.678Z");
    // An incomplete backup (a snapshot, no metadata yet) is not listed.
    env.put(
        &format!(
            "{}snapshot.db",
            env.paths.etcd_backup("20250103T000000.000Z")
        ),
        b"partial",
    );
    env.ballast()
        .args(["etcd", "list-backups", "--name", NAME])
        .assert()
        .success()
        .stdout(
            "ID                     CREATED                REVISION   SIZE       MEMBERS   EPOCH   TAKEN BY\n\
             20250102T030405.678Z   2025-01-02T03:04:05Z   4878       20.0 KiB   3         1       i-0leader\n\
             20250102T040405.000Z   2025-01-02T04:04:05Z   4200       300 B      3         1       i-0leader\n",
        )
        .stderr("");
    let listed = env
        .ballast()
        .args(["etcd", "backups", NAME, "-o", "json"])
        .assert()
        .success();
    let listed: Vec<BackupMetadata> =
        serde_json::from_slice(&listed.get_output().stdout).expect("a JSON list of backups");
    assert_eq!(listed, vec![older, newer.clone()]);

    // One backup is still a list.
    std::fs::remove_dir_all(env.path(&env.paths.etcd_backup(&listed[0].id))).expect("rm");
    let one = env
        .ballast()
        .args(["etcd", "list-backups", NAME, "-o", "json"])
        .assert()
        .success();
    let one: Vec<BackupMetadata> = serde_json::from_slice(&one.get_output().stdout).expect("list");
    assert_eq!(one, vec![newer]);

    // A cluster that does not exist.
    env.ballast()
        .args(["etcd", "list-backups", "nope.example.com"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(
            "cluster \"nope.example.com\" not found",
        ));
}

#[test]
fn restore_refuses_an_unknown_or_corrupted_backup() {
    let env = Env::with_cluster();
    env.ballast()
        .args([
            "etcd",
            "restore-backup",
            NAME,
            "20250101T000000.000Z",
            "--yes",
        ])
        .assert()
        .code(5)
        .stderr(predicate::str::contains("available: none"));
    let a = env.put_backup(1_735_787_045, 0, b"snapshot a");
    let b = env.put_backup(1_735_790_645, 0, b"snapshot b");
    let before = env.snapshot();
    env.ballast()
        .args([
            "etcd",
            "restore-backup",
            NAME,
            "20250101T000000.000Z",
            "--yes",
        ])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(format!(
            "no backup \"20250101T000000.000Z\" in the state store; available: {}, {}",
            a.id, b.id
        )))
        .stderr(predicate::str::contains("ballast etcd list-backups"));
    // Ids are never paths.
    env.ballast()
        .args(["etcd", "restore-backup", NAME, "../../cluster.yaml"])
        .assert()
        .code(5);

    // The snapshot no longer matches its metadata's sha256.
    env.put(
        &format!("{}snapshot.db", env.paths.etcd_backup(&b.id)),
        b"snapshot b, bit-rotted",
    );
    for yes in [false, true] {
        let mut cmd = env.ballast();
        cmd.args(["etcd", "restore-backup", NAME, &b.id]);
        if yes {
            cmd.arg("--yes");
        }
        cmd.assert()
            .code(1)
            .stderr(predicate::str::contains(format!(
                "backup \"{}\" is corrupted: its snapshot's sha256 is {}, its metadata says {}",
                b.id,
                sha256_hex(b"snapshot b, bit-rotted"),
                b.sha256
            )))
            .stderr(predicate::str::contains("choose another backup"));
    }
    // A missing snapshot too.
    std::fs::remove_file(env.path(&format!("{}snapshot.db", env.paths.etcd_backup(&a.id))))
        .expect("rm");
    env.ballast()
        .args(["etcd", "restore-backup", NAME, &a.id, "--yes"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("the snapshot is missing"));
    assert!(
        env.read(&env.paths.etcd_cluster()).is_none(),
        "nothing recorded"
    );
    let after: Vec<_> = env
        .snapshot()
        .into_iter()
        .filter(|(k, _)| !k.contains("/etcd/backups/"))
        .collect();
    let before: Vec<_> = before
        .into_iter()
        .filter(|(k, _)| !k.contains("/etcd/backups/"))
        .collect();
    assert_eq!(after, before, "refusals change nothing");
}

#[test]
fn restore_is_refused_while_etcd_is_healthy() {
    let env = Env::with_cluster();
    let backup = env.put_backup(now() - 600, 0, b"snapshot");
    let record = env.put_record();
    env.put_health("i-0b", false, false, 2);
    env.put_health("i-0leader", true, true, 2);
    let before = env.snapshot();
    env.ballast()
        .args(["etcd", "restore-backup", NAME, &backup.id, "--yes"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "refusing to restore: etcd is healthy (reported within the last 30s by i-0leader)",
        ))
        .stderr(predicate::str::contains(
            "would discard the running cluster's data",
        ))
        .stderr(predicate::str::contains(format!(
            "ballast etcd backup {NAME}"
        )));
    assert_eq!(
        env.read(&env.paths.etcd_cluster()),
        Some(record),
        "etcd/cluster.json unchanged"
    );
    assert_eq!(env.snapshot(), before);
}

#[test]
fn restore_records_a_new_epoch_only_with_yes() {
    let env = Env::with_cluster();
    let backup = env.put_backup(now() - 600, 0, b"the snapshot");
    env.put_record();
    // A report that was healthy long ago (its member is gone) does not block a restore.
    env.put_health("i-0leader", true, true, 300);

    let before = env.snapshot();
    let preview = env
        .ballast()
        .args(["etcd", "restore-backup", NAME, &backup.id])
        .assert()
        .success()
        .stderr(predicate::str::contains("Nothing was changed"))
        .stderr(predicate::str::contains(format!(
            "ballast etcd restore-backup {NAME} {} --yes",
            backup.id
        )));
    let preview = stdout_of(&preview);
    assert!(
        preview.contains(&format!("sha256 {} verified", backup.sha256)),
        "{preview}"
    );
    assert!(preview.contains("would record epoch 2"), "{preview}");
    assert_eq!(env.snapshot(), before, "without --yes nothing is written");

    // The cluster named twice, differently, is a usage error.
    env.ballast()
        .args(["etcd", "restore-backup", NAME, &backup.id, "--yes"])
        .args(["--name", "other.example.com"])
        .assert()
        .code(2);

    let done = env
        .ballast()
        .args(["etcd", "restore-backup", NAME, &backup.id, "--yes"])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "ballast validate cluster {NAME} --wait 5m"
        )));
    assert!(
        stdout_of(&done).contains("etcd epoch 2"),
        "{}",
        stdout_of(&done)
    );
    let record: ClusterRecord = serde_json::from_slice(
        &env.read(&env.paths.etcd_cluster())
            .expect("etcd/cluster.json"),
    )
    .expect("a record");
    assert_eq!(record.epoch, 2);
    assert_eq!(
        record.origin,
        Origin::Restore {
            backup_id: backup.id.clone(),
            sha256: backup.sha256.clone(),
            forced: false,
        }
    );
    assert_eq!(record.seed, None, "a supervisor claims the seed");
    assert!(
        record
            .decided_by
            .starts_with("ballast etcd restore-backup by "),
        "{}",
        record.decided_by
    );
}

#[test]
fn backup_without_waiting_writes_the_request() {
    let env = Env::with_cluster();
    let started = now();
    env.ballast()
        .args(["etcd", "backup", NAME, "--wait", "0"])
        .assert()
        .success()
        .stdout("")
        .stderr(predicate::str::contains("etcd/backup-request.json"));
    let request: serde_json::Value = serde_json::from_slice(
        &env.read(&format!("{}etcd/backup-request.json", env.paths.prefix()))
            .expect("the request"),
    )
    .expect("JSON");
    assert!(request["requestedUnix"].as_i64().expect("time") >= started);
    assert!(request["requestedBy"]
        .as_str()
        .expect("who")
        .starts_with("ballast etcd backup by "));

    env.ballast()
        .args(["etcd", "backup", NAME, "--wait", "soon"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"soon\" is not a duration"));
    // A wait longer than the grammar's maximum is a usage error naming the flag, never a panic.
    for args in [
        ["etcd", "backup", NAME, "--wait", "300000000000000d"],
        ["validate", "cluster", NAME, "--wait", "300000000000000d"],
    ] {
        env.ballast().args(args).assert().code(2).stderr(
            predicate::str::contains("'--wait <DURATION>'").and(predicate::str::contains(
                "\"300000000000000d\" is longer than the longest duration, 3650d (10 years)",
            )),
        );
    }
}

#[test]
fn backup_waits_for_the_leader_and_times_out_clearly() {
    let env = Env::with_cluster();
    // An old backup does not count.
    env.put_backup(now() - 3600, 0, b"old");
    let waited = Instant::now();
    env.ballast()
        .args(["etcd", "backup", NAME, "--wait", "2s"])
        .assert()
        .code(6)
        .stderr(predicate::str::contains(
            "no etcd backup was stored within 2s",
        ))
        .stderr(predicate::str::contains("is still pending"))
        .stderr(predicate::str::contains(format!(
            "ballast validate cluster {NAME}"
        )));
    assert!(waited.elapsed() >= Duration::from_secs(2));

    // A leader that takes the backup while the command waits: the command prints it.
    let request = env.path(&format!("{}etcd/backup-request.json", env.paths.prefix()));
    std::fs::remove_file(&request).expect("rm");
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ballast"))
        .env_clear()
        .env(
            "BALLAST_STATE",
            format!("file://{}", env.store_dir().display()),
        )
        .args(["etcd", "backup", NAME, "--wait", "30s", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ballast");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !request.exists() {
        assert!(Instant::now() < deadline, "no backup request was written");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let taken = env.put_backup(now(), 1, b"taken on request");
    std::fs::remove_file(&request).expect("the leader deletes the request");
    let output = child.wait_with_output().expect("wait");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: BackupMetadata = serde_json::from_slice(&output.stdout).expect("the backup");
    assert_eq!(printed, taken);
}

#[test]
fn backup_accepts_a_leader_whose_clock_is_behind() {
    let env = Env::with_cluster();
    let request = env.path(&format!("{}etcd/backup-request.json", env.paths.prefix()));
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ballast"))
        .env_clear()
        .env(
            "BALLAST_STATE",
            format!("file://{}", env.store_dir().display()),
        )
        .args(["etcd", "backup", NAME, "--wait", "30s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ballast");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !request.exists() {
        assert!(Instant::now() < deadline, "no backup request was written");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Stamped 30 s before the request by the node's clock, but new, and the request was taken.
    let taken = env.put_backup(now() - 30, 0, b"taken on request");
    std::fs::remove_file(&request).expect("the leader deletes the request");
    let output = child.wait_with_output().expect("wait");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("ID "), "{stdout}");
    assert!(stdout.contains(&taken.id), "{stdout}");
    assert!(stdout.contains(&taken.sha256), "{stdout}");
}

#[test]
fn status_shows_the_record_and_each_member() {
    let env = Env::with_cluster();
    env.ballast()
        .args(["etcd", "status", NAME])
        .assert()
        .success()
        .stdout(predicate::str::contains("Epoch: none"))
        .stderr(predicate::str::contains("No etcd member"));
    env.put_record();
    env.put_health("i-0leader", true, true, 1);
    env.put_health("i-0b", false, false, 1);
    let table = env
        .ballast()
        .args(["etcd", "status", NAME])
        .assert()
        .success();
    let table = stdout_of(&table);
    assert!(
        table.starts_with("Epoch: 1 (bootstrap), seed i-0leader"),
        "{table}"
    );
    assert!(
        table.contains("Health: healthy, 3 voting members"),
        "{table}"
    );
    assert!(
        table.contains("i-0b        1       no        follower   1234         no"),
        "{table}"
    );
    assert!(table.contains("etcd does not answer"), "{table}");
    let json = env
        .ballast()
        .args(["etcd", "status", NAME, "-o", "json"])
        .assert()
        .success();
    let json: serde_json::Value = serde_json::from_slice(&json.get_output().stdout).expect("json");
    assert_eq!(json["record"]["epoch"], 1);
    assert_eq!(json["members"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["members"][0]["instanceId"], "i-0b");
    assert_eq!(json["summary"]["healthy"], true);
}

#[test]
fn validate_without_aws_fails_naming_what_it_could_not_check() {
    let env = Env::with_cluster();
    env.ballast()
        .args(["validate", "cluster", NAME])
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_MAX_ATTEMPTS", "1")
        .assert()
        .code(6)
        .stdout(predicate::str::contains(
            "instance groups   fail     auto scaling groups of demo.example.com: DescribeAutoScalingGroups failed",
        ))
        .stdout(predicate::str::contains("no AWS credentials"))
        .stdout(predicate::str::contains(
            "etcd was never bootstrapped (no etcd/cluster.json)",
        ))
        .stderr(predicate::str::contains(
            "cluster demo.example.com is not valid: 2 of 2 checks failed",
        ));
    env.ballast()
        .args(["validate", "cluster", "nope.example.com"])
        .assert()
        .code(5);
}

/// Freshness is judged by the store's clock, not the operator's nor the supervisor's: a report whose own
/// `updatedUnix` looks ten minutes old (a supervisor's clock behind, or the operator's ahead) but that the
/// store wrote a second ago still blocks a restore; `--force` records it anyway, marked forced.
#[test]
fn restore_judges_health_by_the_store_clock_and_force_overrides() {
    let env = Env::with_cluster();
    let backup = env.put_backup(now() - 600, 0, b"snapshot");
    let record = env.put_record();
    env.put_health("i-0leader", true, true, 600);
    let key = format!("{}etcd/health/i-0leader.json", env.paths.prefix());
    env.set_store_time(&key, now() - 1);
    let before = env.snapshot();
    env.ballast()
        .args(["etcd", "restore-backup", NAME, &backup.id, "--yes"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("i-0leader"))
        .stderr(predicate::str::contains("--force"));
    assert_eq!(env.read(&env.paths.etcd_cluster()), Some(record));
    assert_eq!(env.snapshot(), before, "a refusal leaves no marker behind");

    // The reverse skew: the report says "now" but the store wrote it ten minutes ago: its member is gone.
    env.put_health("i-0leader", true, true, 0);
    env.set_store_time(&key, now() - 600);
    env.ballast()
        .args(["etcd", "restore-backup", NAME, &backup.id])
        .assert()
        .success();

    // Fresh by every clock, and --force: recorded, marked forced (healthy members then wipe for it).
    env.put_health("i-0leader", true, true, 0);
    env.ballast()
        .args([
            "etcd",
            "restore-backup",
            NAME,
            &backup.id,
            "--yes",
            "--force",
        ])
        .assert()
        .success();
    let written: ClusterRecord = serde_json::from_slice(
        &env.read(&env.paths.etcd_cluster())
            .expect("etcd/cluster.json"),
    )
    .expect("a record");
    assert_eq!(
        written.origin,
        Origin::Restore {
            backup_id: backup.id.clone(),
            sha256: backup.sha256.clone(),
            forced: true,
        }
    );
    assert!(
        env.read(&env.paths.etcd_clock_marker()).is_none(),
        "the clock marker is deleted"
    );
}

#[test]
fn restore_help_documents_force() {
    let env = Env::with_cluster();
    env.ballast()
        .args(["etcd", "restore-backup", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--force"))
        .stdout(predicate::str::contains("store's clock"));
}
