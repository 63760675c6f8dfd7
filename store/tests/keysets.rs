//! Keysets in a real (file) state store: a cluster's keys as `create cluster` made them, each rotation stage
//! writing exactly what it must (material 0600, the keyset last, no private value in the keyset), and every
//! refused stage (out of order, an unknown key id) leaving the store byte for byte as it was.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ballast_state::keyset::{KeyState, KeysetName, Stage, StageError};
use ballast_state::layout::ClusterPaths;
use ballast_state::pki::ClusterSecrets;
use ballast_store::keystore::{self, KeystoreError, StageReport};
use ballast_store::store::{Precondition, StateStore, StoreOptions};

const CLUSTER: &str = "keys.example.com";

/// Every file under the store's root: path -> (bytes, mode).
fn snapshot(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, (Vec<u8>, u32)>) {
        for entry in std::fs::read_dir(dir).expect("readable dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if !path.ends_with(".lock") {
                let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
                let rel = path
                    .strip_prefix(base)
                    .expect("under root")
                    .display()
                    .to_string();
                out.insert(rel, (std::fs::read(&path).expect("readable"), mode));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

async fn store_with_cluster(root: &Path) -> (StateStore, ClusterSecrets) {
    let url = format!("file://{}", root.display());
    let store = StateStore::open(&url, StoreOptions::default())
        .await
        .expect("open the store");
    let secrets = ClusterSecrets::generate(CLUSTER).expect("secrets");
    for object in secrets
        .objects(&ClusterPaths::new(CLUSTER))
        .expect("objects")
    {
        store
            .put(&object.key, &object.data, &Precondition::MustNotExist)
            .await
            .expect("write a secret");
    }
    (store, secrets)
}

async fn stage(
    store: &StateStore,
    name: KeysetName,
    stage: Stage,
    id: Option<&str>,
) -> Result<StageReport, KeystoreError> {
    keystore::run_stage(store, CLUSTER, name, stage, id, || {
        ballast_state::key_material::generate(CLUSTER, name).map_err(KeystoreError::from)
    })
    .await
}

/// Runs a stage that must be refused and checks that nothing in the store changed.
async fn refused(
    store: &StateStore,
    root: &Path,
    name: KeysetName,
    which: Stage,
    id: Option<&str>,
) -> StageError {
    let before = snapshot(root);
    let err = stage(store, name, which, id).await.expect_err("refused");
    assert_eq!(
        snapshot(root),
        before,
        "a refused {which:?} changed the store"
    );
    match err {
        KeystoreError::Stage(e) => e,
        other => panic!("expected a stage error, got {other}"),
    }
}

#[tokio::test]
async fn an_etcd_ca_rotation_writes_what_it_must_and_refusals_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = &dir.path().join("state");
    let (store, secrets) = store_with_cluster(root).await;

    // A cluster never rotated: one primary key each, the one create cluster made, with dates from the CA.
    let all = keystore::load_all(&store, CLUSTER).await.expect("keysets");
    assert_eq!(all.len(), 4);
    for keyset in &all {
        assert_eq!(keyset.items.len(), 1, "{keyset:?}");
        assert_eq!(keyset.items[0].state, KeyState::Primary);
        assert!(keyset.items[0].original);
    }
    let etcd = &all[1];
    assert!(etcd.items[0]
        .expires
        .as_deref()
        .is_some_and(|e| e.ends_with('Z')));
    assert_eq!(
        keystore::node_keys(&store, CLUSTER)
            .await
            .expect("node keys"),
        Default::default(),
        "nothing rotated: node specs stay as they were"
    );

    let name = KeysetName::EtcdCa;
    let err = refused(&store, root, name, Stage::Promote, None).await;
    assert!(matches!(err, StageError::NothingStaged { .. }), "{err}");
    let err = refused(&store, root, name, Stage::Drop, Some("0123456789abcdef")).await;
    assert!(matches!(err, StageError::UnknownKey { .. }), "{err}");

    let added = stage(&store, name, Stage::Add, None).await.expect("add");
    assert!(added.changed, "{added:?}");
    let keyset = keystore::load(&store, CLUSTER, name)
        .await
        .expect("load")
        .keyset;
    let new = keyset.items[1].clone();
    assert_eq!(new.state, KeyState::Next);
    let paths = ClusterPaths::new(CLUSTER);
    let files = snapshot(root);
    let key_file = &files[&paths.pki_item_key("etcd-ca", &new.id)];
    assert_eq!(key_file.1, 0o600, "a private key is 0600");
    assert!(String::from_utf8_lossy(&key_file.0).contains("PRIVATE KEY"));
    let keyset_file = &files[&paths.keyset("etcd-ca")];
    let keyset_text = String::from_utf8_lossy(&keyset_file.0);
    assert!(!keyset_text.contains("PRIVATE"), "{keyset_text}");
    assert!(
        !keyset_text.contains(&secrets.etcd_ca.key_pem),
        "{keyset_text}"
    );

    // Safe to run twice: the second add changes nothing.
    let before = snapshot(root);
    let again = stage(&store, name, Stage::Add, None)
        .await
        .expect("add again");
    assert!(!again.changed, "{again:?}");
    assert_eq!(snapshot(root), before);

    let keys = keystore::node_keys(&store, CLUSTER)
        .await
        .expect("node keys");
    let at = keys.locations(&paths);
    assert_eq!(
        at.etcd_ca_cert,
        Some(paths.pki_cert("etcd-ca")),
        "the old CA still issues"
    );
    assert_eq!(
        at.etcd_ca_trusted,
        [paths.pki_item_cert("etcd-ca", &new.id)]
    );

    let err = refused(&store, root, name, Stage::Drop, None).await;
    assert!(matches!(err, StageError::NotPromoted { .. }), "{err}");
    let err = refused(
        &store,
        root,
        name,
        Stage::Promote,
        Some(&keyset.items[0].id),
    )
    .await;
    assert!(matches!(err, StageError::WrongKey { .. }), "{err}");
    assert!(
        stage(&store, name, Stage::Promote, Some(&new.id))
            .await
            .expect("promote")
            .changed
    );
    let at = keystore::node_keys(&store, CLUSTER)
        .await
        .expect("keys")
        .locations(&paths);
    assert_eq!(
        at.etcd_ca_cert,
        Some(paths.pki_item_cert("etcd-ca", &new.id))
    );
    assert_eq!(at.etcd_ca_trusted, [paths.pki_cert("etcd-ca")]);
    let err = refused(&store, root, name, Stage::Add, None).await;
    assert!(
        matches!(err, StageError::RotationInProgress { .. }),
        "{err}"
    );

    assert!(
        stage(&store, name, Stage::Drop, None)
            .await
            .expect("drop")
            .changed
    );
    let at = keystore::node_keys(&store, CLUSTER)
        .await
        .expect("keys")
        .locations(&paths);
    assert!(at.etcd_ca_trusted.is_empty());
    // The old CA is distrusted, not destroyed.
    assert!(snapshot(root).contains_key(&paths.pki_key("etcd-ca")));
}

#[tokio::test]
async fn an_encryption_key_rotation_keeps_every_key_and_drops_only_after_the_rewrite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = &dir.path().join("state");
    let (store, secrets) = store_with_cluster(root).await;
    let name = KeysetName::EncryptionKey;
    let err = refused(&store, root, name, Stage::Rewrite, None).await;
    assert!(matches!(err, StageError::NothingToRewrite { .. }), "{err}");

    stage(&store, name, Stage::Add, None).await.expect("add");
    let paths = ClusterPaths::new(CLUSTER);
    let stored = &snapshot(root)[&paths.secret("encryption-keys.yaml")];
    assert_eq!(stored.1, 0o600);
    let text = String::from_utf8_lossy(&stored.0).to_string();
    assert!(
        text.contains(&secrets.encryption_keys.keys[0].secret),
        "the old key is kept"
    );
    let keyset = keystore::load(&store, CLUSTER, name)
        .await
        .expect("load")
        .keyset;
    assert_eq!(keyset.items.len(), 2);
    let keyset_text = yaml_serde::to_string(&keyset).expect("yaml");
    assert!(!keyset_text.contains(&secrets.encryption_keys.keys[0].secret));

    stage(&store, name, Stage::Promote, None)
        .await
        .expect("promote");
    let order = keystore::node_keys(&store, CLUSTER)
        .await
        .expect("keys")
        .locations(&paths)
        .encryption_key_names
        .expect("names");
    assert_eq!(
        order,
        [keyset.items[1].id.clone(), keyset.items[0].id.clone()]
    );
    let err = refused(&store, root, name, Stage::Drop, None).await;
    assert!(matches!(err, StageError::NotRewritten { .. }), "{err}");
    stage(&store, name, Stage::Rewrite, None)
        .await
        .expect("rewrite");
    stage(&store, name, Stage::Drop, None).await.expect("drop");
    let order = keystore::node_keys(&store, CLUSTER)
        .await
        .expect("keys")
        .locations(&paths)
        .encryption_key_names
        .expect("names");
    assert_eq!(order, [keyset.items[1].id.clone()]);
}
