//! The state store's contract, run against both backends: the file backend in a temp dir, and S3 on the AWS
//! emulator (moto through the project's launcher) over HTTP through the real AWS SDK.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use ballast_e2e::aws;
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::layout::ClusterPaths;
use ballast_state::pki::ClusterSecrets;
use ballast_store::registry::{Registry, RegistryError, SpecChange, Writer};
use ballast_store::store::{Precondition, StateStore, StoreError, StoreOptions};

async fn file_store(dir: &tempfile::TempDir) -> StateStore {
    StateStore::open(
        &format!("file://{}", dir.path().join("state").display()),
        StoreOptions::default(),
    )
    .await
    .expect("open file store")
}

async fn s3_store(hint: &str) -> StateStore {
    let bucket = aws::new_bucket(hint).await;
    StateStore::open(&format!("s3://{bucket}/clusters"), StoreOptions::default())
        .await
        .expect("open s3 store")
}

/// Create-if-absent, update-if-unchanged, and the errors when either does not hold.
async fn conditional_writes(store: &StateStore) {
    let key = "c1/object.yaml";
    assert_eq!(store.get(key).await.expect("get"), None);
    let v1 = store
        .put(key, b"one", &Precondition::MustNotExist)
        .await
        .expect("create");
    let err = store
        .put(key, b"again", &Precondition::MustNotExist)
        .await
        .expect_err("a second create must fail");
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("already exists"), "{err}");

    let read = store.get(key).await.expect("get").expect("exists");
    assert_eq!(read.data, b"one");
    assert_eq!(read.version, v1);
    let v2 = store
        .put(key, b"two", &Precondition::MustMatch(v1.clone()))
        .await
        .expect("update at the version read");
    assert_ne!(v1, v2);
    let err = store
        .put(key, b"stale", &Precondition::MustMatch(v1))
        .await
        .expect_err("an update from a stale version must fail");
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(
        store.get(key).await.expect("get").expect("exists").data,
        b"two",
        "the stale write changed nothing"
    );

    store
        .put("c1/sub/a", b"a", &Precondition::None)
        .await
        .expect("put");
    store
        .put("c2/b", b"b", &Precondition::None)
        .await
        .expect("put");
    assert_eq!(
        store.list("c1/").await.expect("list"),
        vec!["c1/object.yaml".to_string(), "c1/sub/a".to_string()]
    );
    store.delete("c1/sub/a").await.expect("delete");
    store
        .delete("c1/sub/a")
        .await
        .expect("deleting a missing object is fine");
    assert_eq!(
        store.list("c1/").await.expect("list"),
        vec!["c1/object.yaml".to_string()]
    );
}

/// Many writers update the same version at once: exactly one wins, the others get a conflict, and the stored
/// object is the winner's, whole.
async fn racing_writers(store: StateStore) {
    let key = "race/object";
    let base = store
        .put(key, b"base", &Precondition::MustNotExist)
        .await
        .expect("create");
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let data = format!("writer-{i}-").repeat(1000);
            let result = store
                .put(key, data.as_bytes(), &Precondition::MustMatch(base))
                .await;
            (data, result)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (data, result) = task.await.expect("task");
        match result {
            Ok(_) => winners.push(data),
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one writer wins");
    let stored = store.get(key).await.expect("get").expect("exists");
    assert_eq!(
        stored.data,
        winners[0].as_bytes(),
        "the winner's data, whole"
    );

    let mut creators = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        creators.push(tokio::spawn(async move {
            store
                .put(
                    "race/new",
                    format!("{i}").as_bytes(),
                    &Precondition::MustNotExist,
                )
                .await
        }));
    }
    let mut created = 0;
    for task in creators {
        if task.await.expect("task").is_ok() {
            created += 1;
        }
    }
    assert_eq!(created, 1, "exactly one create wins");
}

fn demo_config(name: &str) -> ballast_state::spec::ClusterConfig {
    generate(&ClusterTemplate {
        name: name.to_string(),
        zones: vec![
            "us-west-2a".into(),
            "us-west-2b".into(),
            "us-west-2c".into(),
        ],
        ..Default::default()
    })
    .expect("template")
}

/// Two operators change the same cluster at once: one change lands whole, the other is refused whole.
async fn racing_cluster_changes(store: StateStore) {
    let registry = Arc::new(Registry::new(store));
    let config = demo_config("race.example.com");
    let secrets = ClusterSecrets::generate(config.name()).expect("secrets");
    registry
        .create(&config, &secrets, &Writer::current("test create"))
        .await
        .expect("create");
    let err = registry
        .create(&config, &secrets, &Writer::current("test create again"))
        .await
        .expect_err("the cluster exists");
    assert!(matches!(err, RegistryError::ClusterExists { .. }), "{err}");

    let stored = registry.load(config.name()).await.expect("load");
    let mut tasks = Vec::new();
    for size in [4u32, 5u32] {
        let registry = registry.clone();
        let mut nodes = stored
            .config
            .instance_group("nodes")
            .expect("nodes")
            .clone();
        nodes.spec.min_size = Some(size);
        nodes.spec.max_size = Some(size);
        let change = SpecChange {
            put_groups: vec![(nodes, stored.group_precondition("nodes"))],
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move {
            let writer = Writer::current(&format!("resize to {size}"));
            (
                size,
                registry.change("race.example.com", &change, &writer).await,
            )
        }));
    }
    let mut landed = Vec::new();
    for task in tasks {
        let (size, result) = task.await.expect("task");
        match result {
            Ok(_) => landed.push(size),
            Err(RegistryError::Conflict(_) | RegistryError::Locked { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(landed.len(), 1, "exactly one change lands: {landed:?}");
    let after = registry.load("race.example.com").await.expect("load");
    let nodes = after.config.instance_group("nodes").expect("nodes");
    assert_eq!(nodes.spec.min_size, Some(landed[0]));
    let completed = registry
        .load_completed("race.example.com")
        .await
        .expect("completed");
    assert_eq!(
        completed
            .instance_group("nodes")
            .expect("nodes")
            .spec
            .max_size,
        Some(landed[0]),
        "the completed spec follows the change that landed"
    );
    let paths = ClusterPaths::new("race.example.com");
    assert_eq!(
        registry.store().get(&paths.lock()).await.expect("get"),
        None,
        "no lock left behind"
    );

    // An invalid change writes nothing: not even the lock.
    let before = registry.store().list(&paths.prefix()).await.expect("list");
    let mut bad = after.config.instance_group("nodes").expect("nodes").clone();
    bad.spec.subnets = vec!["nowhere".into()];
    let change = SpecChange {
        put_groups: vec![(bad, after.group_precondition("nodes"))],
        ..Default::default()
    };
    let err = registry
        .change("race.example.com", &change, &Writer::current("bad change"))
        .await
        .expect_err("invalid");
    assert!(
        err.to_string()
            .contains("\"nowhere\" is not a subnet of the cluster"),
        "{err}"
    );
    assert_eq!(
        registry.store().list(&paths.prefix()).await.expect("list"),
        before
    );
    let unchanged = registry.load("race.example.com").await.expect("load");
    assert_eq!(unchanged.group_versions, after.group_versions);

    // Delete removes everything but what it is told to keep (etcd backups), the cluster first.
    let backup = format!("{}b1/metadata.json", paths.etcd_backups());
    registry
        .store()
        .put(&backup, b"{}", &Precondition::MustNotExist)
        .await
        .expect("a backup object");
    let n = registry
        .delete(
            "race.example.com",
            &Writer::current("delete"),
            &[paths.etcd_backups()],
        )
        .await
        .expect("delete");
    assert_eq!(n, before.len());
    assert_eq!(
        registry.store().list(&paths.prefix()).await.expect("list"),
        vec![backup.clone()]
    );
    assert!(registry.list_clusters().await.expect("list").is_empty());
    // A new cluster of the same name keeps them too; a delete without keeping them removes them.
    let config = demo_config("race.example.com");
    let secrets = ClusterSecrets::generate(config.name()).expect("secrets");
    registry
        .create(&config, &secrets, &Writer::current("create again"))
        .await
        .expect("create again");
    assert!(registry
        .store()
        .list(&paths.prefix())
        .await
        .expect("list")
        .contains(&backup));
    registry
        .delete("race.example.com", &Writer::current("delete all"), &[])
        .await
        .expect("delete all");
    assert!(registry
        .store()
        .list(&paths.prefix())
        .await
        .expect("list")
        .is_empty());
}

/// A writer holding the lock blocks others, with a message naming it, until the store says it is 2 minutes old.
async fn held_lock_is_reported(store: StateStore) {
    let registry = Registry::new(store);
    let config = demo_config("locked.example.com");
    let secrets = ClusterSecrets::generate(config.name()).expect("secrets");
    registry
        .create(&config, &secrets, &Writer::current("create"))
        .await
        .expect("create");
    let paths = ClusterPaths::new("locked.example.com");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let record = serde_json::json!({
        "holder": "alice@laptop pid 42", "command": "ballast edit cluster",
        "token": "t", "acquiredAt": now, "expiresAt": now + 60
    });
    registry
        .store()
        .put(
            &paths.lock(),
            record.to_string().as_bytes(),
            &Precondition::MustNotExist,
        )
        .await
        .expect("plant lock");
    let stored = registry.load("locked.example.com").await.expect("load");
    let change = SpecChange {
        cluster: Some((
            stored.config.cluster.clone(),
            Precondition::MustMatch(stored.cluster_version.clone()),
        )),
        ..Default::default()
    };
    let err = registry
        .change("locked.example.com", &change, &Writer::current("edit"))
        .await
        .expect_err("locked");
    let message = err.to_string();
    assert!(
        message.contains("alice@laptop pid 42") && message.contains("ballast edit cluster"),
        "{message}"
    );

    // A record whose times say it expired long ago (its writer's clock is behind) is still held: a lock's age
    // is the store's to judge, by when it wrote the lock (a takeover once that is over 2 minutes is
    // state/tests/lock_wait.rs, which can date a file back; S3 objects cannot be).
    let behind = serde_json::json!({
        "holder": "alice@laptop pid 42", "command": "ballast edit cluster",
        "token": "t", "acquiredAt": now - 600, "expiresAt": now - 300
    });
    let held = registry
        .store()
        .get(&paths.lock())
        .await
        .expect("get")
        .expect("lock");
    registry
        .store()
        .put(
            &paths.lock(),
            behind.to_string().as_bytes(),
            &Precondition::MustMatch(held.version),
        )
        .await
        .expect("rewrite lock");
    let err = registry
        .change("locked.example.com", &change, &Writer::current("edit"))
        .await
        .expect_err("a lock the store wrote just now is held");
    assert!(
        matches!(err, ballast_store::registry::RegistryError::Locked { .. }),
        "{err}"
    );
    registry
        .store()
        .delete(&paths.lock())
        .await
        .expect("release");
    registry
        .change("locked.example.com", &change, &Writer::current("edit"))
        .await
        .expect("once released, the change lands");
    assert_eq!(
        registry.store().get(&paths.lock()).await.expect("get"),
        None
    );
}

/// A listing's versions are the ones a read returns, change with each write, and cover only the prefix.
async fn listed_versions(store: &StateStore) {
    let a = store
        .put("c1/reports/i-a.json", b"a1", &Precondition::None)
        .await
        .expect("put a");
    store
        .put("c1/reports/i-b.json", b"b1", &Precondition::None)
        .await
        .expect("put b");
    store
        .put("c1/other.yaml", b"x", &Precondition::None)
        .await
        .expect("put other");
    let listed = store.list_versions("c1/reports/").await.expect("list");
    assert_eq!(
        listed.keys().collect::<Vec<_>>(),
        ["c1/reports/i-a.json", "c1/reports/i-b.json"]
    );
    for (key, version) in &listed {
        let read = store.get(key).await.expect("get").expect("exists");
        assert_eq!(
            &read.version, version,
            "{key}: listed and read versions differ"
        );
    }
    assert_eq!(listed["c1/reports/i-a.json"], a);
    let a2 = store
        .put("c1/reports/i-a.json", b"a2", &Precondition::None)
        .await
        .expect("rewrite a");
    let relisted = store
        .list_versions("c1/reports/")
        .await
        .expect("list again");
    assert_eq!(relisted["c1/reports/i-a.json"], a2);
    assert_ne!(a2, a, "a rewrite with other bytes must change the version");
    assert_eq!(
        relisted["c1/reports/i-b.json"],
        listed["c1/reports/i-b.json"]
    );
    assert!(store
        .list_versions("c2/")
        .await
        .expect("list empty")
        .is_empty());
}

/// Objects a node may write are read with a bound: one at the limit is read whole, one a byte over it is refused
/// naming its key and the limit (with its version, for a writer that replaces it), a missing one is `None`.
async fn bounded_reads(store: &StateStore) {
    use ballast_state::limits::ReadLimit;
    let limit = ReadLimit {
        bytes: 1000,
        what: "a test object",
    };
    let at_limit = vec![b'a'; 1000];
    let over = vec![b'b'; 100_000];
    let v_at = store
        .put("c1/reports/i-at.json", &at_limit, &Precondition::None)
        .await
        .expect("put");
    let v_over = store
        .put("c1/reports/i-over.json", &over, &Precondition::None)
        .await
        .expect("put");
    let read = store
        .get_bounded("c1/reports/i-at.json", limit)
        .await
        .expect("read at the limit")
        .expect("exists");
    assert_eq!(read.data, at_limit);
    assert_eq!(read.version, v_at);
    let err = store
        .get_bounded("c1/reports/i-over.json", limit)
        .await
        .expect_err("a byte over the limit is refused");
    let message = err.to_string();
    for expected in [
        "c1/reports/i-over.json",
        "is larger than 1000 bytes, the most Ballast reads of a test object",
    ] {
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
    match err {
        StoreError::TooLarge { version, .. } => assert_eq!(version, v_over),
        other => panic!("expected TooLarge, got {other}"),
    }
    assert_eq!(
        store
            .get_bounded("c1/reports/i-none.json", limit)
            .await
            .expect("a missing object is no error"),
        None
    );
}

#[tokio::test]
async fn file_store_bounded_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    bounded_reads(&file_store(&dir).await).await;
}

#[tokio::test]
async fn s3_store_bounded_reads() {
    bounded_reads(&s3_store("bounded").await).await;
}

#[tokio::test]
async fn file_store_listed_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    listed_versions(&file_store(&dir).await).await;
}

#[tokio::test]
async fn s3_store_listed_versions() {
    listed_versions(&s3_store("versions").await).await;
}

#[tokio::test]
async fn file_store_conditional_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = file_store(&dir).await;
    conditional_writes(&store).await;
    // Private material and everything else: owner-only.
    let path = dir.path().join("state/c1/object.yaml");
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", path.display());
    let dir_mode = std::fs::metadata(dir.path().join("state/c1"))
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_racing_writers() {
    let dir = tempfile::tempdir().expect("tempdir");
    racing_writers(file_store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_racing_cluster_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    racing_cluster_changes(file_store(&dir).await).await;
}

#[tokio::test]
async fn file_store_held_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    held_lock_is_reported(file_store(&dir).await).await;
}

#[tokio::test]
async fn s3_store_conditional_writes() {
    conditional_writes(&s3_store("cond").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_store_racing_writers() {
    racing_writers(s3_store("race").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_store_racing_cluster_changes() {
    racing_cluster_changes(s3_store("cluster").await).await;
}

#[tokio::test]
async fn s3_store_held_lock() {
    held_lock_is_reported(s3_store("lock").await).await;
}

#[tokio::test]
async fn s3_objects_are_encrypted_at_rest() {
    let bucket = aws::new_bucket("sse").await;
    let store = StateStore::open(&format!("s3://{bucket}/p"), StoreOptions::default())
        .await
        .expect("open");
    store
        .put("k", b"v", &Precondition::None)
        .await
        .expect("put");
    let kms = StateStore::open(
        &format!("s3://{bucket}/q"),
        StoreOptions {
            kms_key_id: Some("alias/ballast-state".into()),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("open");
    kms.put("k", b"v", &Precondition::None).await.expect("put");
    let client = aws::s3_client().await;
    let head = client
        .head_object()
        .bucket(&bucket)
        .key("p/k")
        .send()
        .await
        .expect("head");
    assert_eq!(
        head.server_side_encryption(),
        Some(&aws_sdk_s3::types::ServerSideEncryption::Aes256)
    );
    let head = client
        .head_object()
        .bucket(&bucket)
        .key("q/k")
        .send()
        .await
        .expect("head");
    assert_eq!(
        head.server_side_encryption(),
        Some(&aws_sdk_s3::types::ServerSideEncryption::AwsKms)
    );
    assert_eq!(head.ssekms_key_id(), Some("alias/ballast-state"));
}

#[tokio::test]
async fn s3_errors_say_what_to_do() {
    aws::shared_emulator();
    let store = StateStore::open("s3://no-such-bucket-ballast/x", StoreOptions::default())
        .await
        .expect("open");
    let err = store
        .put("k", b"v", &Precondition::None)
        .await
        .expect_err("no bucket");
    let message = err.to_string();
    assert!(
        message.contains("NoSuchBucket") && message.contains("create the bucket"),
        "{message}"
    );
}

#[tokio::test]
async fn store_urls_are_checked() {
    for (url, expected) in [
        ("file://relative/path", "absolute path"),
        ("s3://", "bucket name is missing"),
        ("gs://bucket", "use s3://BUCKET/PREFIX or file:///PATH"),
    ] {
        let err = StateStore::open(url, StoreOptions::default())
            .await
            .expect_err(url);
        assert!(err.to_string().contains(expected), "{url}: {err}");
    }
}
