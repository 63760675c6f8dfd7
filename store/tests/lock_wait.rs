//! Writers contending on a cluster's lock wait a bounded time (`--lock-wait`), then fail naming who holds it.

use std::time::Duration;

use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::layout::ClusterPaths;
use ballast_state::pki::ClusterSecrets;
use ballast_store::registry::{Registry, RegistryError, Writer};
use ballast_store::store::{Precondition, StateStore, StoreOptions};

const NAME: &str = "lock.example.com";

/// The lock another writer holds for the next two minutes, as that writer stores it.
fn held_lock() -> Vec<u8> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    serde_json::json!({
        "holder": "alice@laptop pid 42",
        "command": "ballast edit cluster",
        "token": "00112233445566778899aabbccddeeff",
        "acquiredAt": now,
        "expiresAt": now + 120,
    })
    .to_string()
    .into_bytes()
}

async fn store(dir: &tempfile::TempDir) -> StateStore {
    StateStore::open(
        // A directory the store creates (0700): a temporary directory is open to others, and refused.
        &format!("file://{}", dir.path().join("state").display()),
        StoreOptions::default(),
    )
    .await
    .expect("file store")
}

async fn create(registry: &Registry) -> Result<(), RegistryError> {
    let config = generate(&ClusterTemplate {
        name: NAME.into(),
        zones: vec!["us-west-2a".into()],
        ..Default::default()
    })
    .expect("template");
    let secrets = ClusterSecrets::generate(NAME).expect("secrets");
    registry
        .create(
            &config,
            &secrets,
            &Writer::current("ballast create cluster"),
        )
        .await
        .map(|_| ())
}

#[tokio::test]
async fn a_writer_waits_its_bound_then_names_the_holder_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir).await;
    let lock = ClusterPaths::new(NAME).lock();
    store
        .put(&lock, &held_lock(), &Precondition::MustNotExist)
        .await
        .expect("the other writer's lock");

    let started = std::time::Instant::now();
    let registry = Registry::new(store.clone()).with_lock_wait(Duration::from_secs(1));
    let err = create(&registry).await.expect_err("the lock is held");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "it did not wait"
    );
    let message = err.to_string();
    assert!(matches!(err, RegistryError::Locked { .. }), "{message}");
    assert!(
        message.contains("is being changed by alice@laptop pid 42 (`ballast edit cluster`"),
        "{message}"
    );
    assert!(
        message.contains("after waiting 1s for it (--lock-wait)"),
        "{message}"
    );
    let keys = store.list(&format!("{NAME}/")).await.expect("list");
    assert_eq!(keys, vec![lock], "nothing but the holder's lock is stored");

    // Without a wait it fails at once.
    let err = create(&Registry::new(store.clone()))
        .await
        .expect_err("held");
    assert!(err.to_string().contains("after waiting 0s"), "{err}");
}

#[tokio::test]
async fn a_writer_that_waits_gets_the_lock_once_it_is_released() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir).await;
    let lock = ClusterPaths::new(NAME).lock();
    store
        .put(&lock, &held_lock(), &Precondition::MustNotExist)
        .await
        .expect("the other writer's lock");
    let releaser = {
        let store = store.clone();
        let lock = lock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            store.delete(&lock).await.expect("release");
        })
    };
    let registry = Registry::new(store.clone()).with_lock_wait(Duration::from_secs(30));
    create(&registry)
        .await
        .expect("created once the lock was released");
    releaser.await.expect("releaser");
    assert!(store
        .get(&ClusterPaths::new(NAME).cluster_spec())
        .await
        .expect("read")
        .is_some());
}

/// A lock record as a writer whose clock is `skew` seconds off would store it (its times by its own clock).
fn lock_from_a_skewed_clock(skew: i64) -> Vec<u8> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp() + skew;
    serde_json::json!({
        "holder": "bob@skewed pid 7",
        "command": "ballast edit cluster",
        "token": "ffeeddccbbaa99887766554433221100",
        "acquiredAt": now,
        "expiresAt": now + 120,
    })
    .to_string()
    .into_bytes()
}

/// Whether a lock's holder is gone is judged by the store's clock (when the store wrote the lock), never by the
/// times in the record, which are its writer's: a writer an hour behind does not lose a lock it holds now, and
/// one a day ahead does not keep, for a day, a lock it left ten minutes ago.
#[tokio::test]
async fn a_lock_is_judged_by_the_stores_clock_not_its_writers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir).await;
    let lock = ClusterPaths::new(NAME).lock();
    let registry = Registry::new(store.clone());

    // Written just now by a writer whose clock is an hour behind: its record says it expired long ago.
    store
        .put(&lock, &lock_from_a_skewed_clock(-3600), &Precondition::None)
        .await
        .expect("lock");
    let err = create(&registry).await.expect_err("a fresh lock is held");
    assert!(
        matches!(&err, RegistryError::Locked { holder, .. } if holder == "bob@skewed pid 7"),
        "{err}"
    );

    // Written ten minutes ago (by the store's clock) by a writer a day ahead: its record says it holds for a
    // day, but its holder stopped renewing it long ago.
    store
        .put(
            &lock,
            &lock_from_a_skewed_clock(86_400),
            &Precondition::None,
        )
        .await
        .expect("lock");
    let path = dir.path().join("state").join(&lock);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("the lock's file")
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(600))
        .expect("mtime");
    create(&registry).await.expect("a stale lock is taken over");
    assert!(
        store.get(&lock).await.expect("get").is_none(),
        "the creator released the lock it took over"
    );
}
