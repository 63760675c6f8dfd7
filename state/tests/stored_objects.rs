//! What the registry and the file store refuse or repair when they open what is already on disk: objects
//! whose name is not the one their key gives, and a store root others may read or write.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ballast_state::registry::{Registry, RegistryError};
use ballast_state::store::{StateStore, StoreOptions};

const CLUSTER: &str = "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata: {name: demo.example.com}
spec:
  kubernetesVersion: 1.33.4
  subnets:
  - {name: us-west-2a, zone: us-west-2a}
";

fn group(name: &str) -> String {
    format!(
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {{name: {name}}}\n\
         spec: {{role: Node, subnets: [us-west-2a]}}\n"
    )
}

fn write(root: &Path, key: &str, text: &str) {
    let path = root.join(key);
    std::fs::create_dir_all(path.parent().expect("key has a parent")).expect("create dirs");
    std::fs::write(path, text).expect("write object");
}

async fn registry(root: &Path) -> Registry {
    let url = format!("file://{}", root.display());
    Registry::new(
        StateStore::open(&url, StoreOptions::default())
            .await
            .expect("open the store"),
    )
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn objects_named_as_their_keys_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "demo.example.com/cluster.yaml", CLUSTER);
    write(
        dir.path(),
        "demo.example.com/instancegroups/nodes.yaml",
        &group("nodes"),
    );
    let stored = registry(dir.path())
        .await
        .load("demo.example.com")
        .await
        .expect("a consistent cluster loads");
    assert_eq!(stored.config.instance_groups[0].metadata.name, "nodes");
}

#[tokio::test]
async fn an_instance_group_named_other_than_its_key_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "demo.example.com/cluster.yaml", CLUSTER);
    write(
        dir.path(),
        "demo.example.com/instancegroups/nodes.yaml",
        &group("evil"),
    );
    let err = registry(dir.path())
        .await
        .load("demo.example.com")
        .await
        .expect_err("nodes.yaml holding evil must not load");
    assert!(matches!(err, RegistryError::Corrupt(_)), "{err:?}");
    let message = err.to_string();
    for expected in [
        "demo.example.com/instancegroups/nodes.yaml",
        "holds InstanceGroup/evil, but its key is for InstanceGroup/nodes",
        "put a good copy back in its place",
    ] {
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
}

#[tokio::test]
async fn a_cluster_named_other_than_its_key_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "other.example.com/cluster.yaml",
        &CLUSTER.replace("demo.example.com", "other.example.com"),
    );
    write(
        dir.path(),
        "demo.example.com/cluster.yaml",
        &CLUSTER.replace("demo.", "evil."),
    );
    let err = registry(dir.path())
        .await
        .load("demo.example.com")
        .await
        .expect_err("demo's cluster.yaml holding evil must not load");
    let message = err.to_string();
    assert!(
        message.contains(
            "holds Cluster/evil.example.com, but its key is for Cluster/demo.example.com"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn an_open_store_root_of_ours_is_tightened_to_0700() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    write(&root, "demo.example.com/cluster.yaml", CLUSTER);
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let cluster_dir = root.join("demo.example.com");
    std::fs::set_permissions(&cluster_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    registry(&root).await;
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&cluster_dir), 0o700);
}

#[tokio::test]
async fn a_private_store_root_is_left_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o500)).expect("chmod");
    registry(&root).await;
    assert_eq!(mode(&root), 0o500);
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

#[tokio::test]
async fn an_open_store_root_of_someone_else_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    // Giving the folder away needs root, as the project's image tests do: fail loudly rather than skip.
    std::os::unix::fs::chown(&root, Some(65534), Some(65534)).expect(
        "giving the folder to another user (run the tests as root, as tools/test does in CI)",
    );
    let url = format!("file://{}", root.display());
    let err = StateStore::open(&url, StoreOptions::default())
        .await
        .expect_err("a folder others may write and we do not own must be refused");
    let message = err.to_string();
    for expected in [
        root.display().to_string(),
        "mode 0777".to_string(),
        "uid 65534".to_string(),
        "chmod 0700".to_string(),
    ] {
        assert!(message.contains(&expected), "{expected:?} not in {message}");
    }
    assert_eq!(
        mode(&root),
        0o777,
        "a folder that is not ours is left alone"
    );
}
