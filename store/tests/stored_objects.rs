//! What the registry and the file store refuse when they open what is already on disk: objects whose name is
//! not the one their key gives, and a store root others may read or write or that is no directory (refused,
//! never re-moded: the store sets modes only on what it creates).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ballast_store::registry::{Registry, RegistryError};
use ballast_store::store::{StateStore, StoreOptions};

const CLUSTER: &str = "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata: {name: demo.example.com}
spec:
  kubernetesVersion: 1.36.4
  subnets:
  - {name: us-west-2a, zone: us-west-2a}
";

fn group(name: &str) -> String {
    format!(
        "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {{name: {name}}}\n\
         spec: {{role: Node, subnets: [us-west-2a]}}\n"
    )
}

/// Writes an object by hand, as an operator or an older version could have; a root it makes is private, as
/// the store makes its own (the store refuses a root open to others).
fn write(root: &Path, key: &str, text: &str) {
    if !root.exists() {
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(root)
            .expect("create the root");
    }
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
    let root = dir.path().join("store");
    write(&root, "demo.example.com/cluster.yaml", CLUSTER);
    write(
        &root,
        "demo.example.com/instancegroups/nodes.yaml",
        &group("nodes"),
    );
    let stored = registry(&root)
        .await
        .load("demo.example.com")
        .await
        .expect("a consistent cluster loads");
    assert_eq!(stored.config.instance_groups[0].metadata.name, "nodes");
}

#[tokio::test]
async fn an_instance_group_named_other_than_its_key_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    write(&root, "demo.example.com/cluster.yaml", CLUSTER);
    write(
        &root,
        "demo.example.com/instancegroups/nodes.yaml",
        &group("evil"),
    );
    let err = registry(&root)
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
    let root = dir.path().join("store");
    write(
        &root,
        "other.example.com/cluster.yaml",
        &CLUSTER.replace("demo.example.com", "other.example.com"),
    );
    write(
        &root,
        "demo.example.com/cluster.yaml",
        &CLUSTER.replace("demo.", "evil."),
    );
    let err = registry(&root)
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

/// Opens the store at `root`, expecting a refusal; returns its message.
async fn refused(root: &Path) -> String {
    let url = format!("file://{}", root.display());
    StateStore::open(&url, StoreOptions::default())
        .await
        .expect_err("the store must refuse this root")
        .to_string()
}

fn full_mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o7777
}

/// The store sets modes only on what it creates: an open root of ours is refused with the fix, and neither it
/// nor anything under it changes.
#[tokio::test]
async fn an_open_store_root_of_ours_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    write(&root, "demo.example.com/cluster.yaml", CLUSTER);
    let cluster_dir = root.join("demo.example.com");
    let file = cluster_dir.join("cluster.yaml");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&cluster_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let message = refused(&root).await;
    for expected in [
        format!("state store directory {} has mode 0755", root.display()),
        format!("`chmod 0700 {}`", root.display()),
        "use a directory of the store's own instead".to_string(),
    ] {
        assert!(message.contains(&expected), "{expected:?} not in {message}");
    }
    assert_eq!(full_mode(&root), 0o755);
    assert_eq!(full_mode(&cluster_dir), 0o755);
    assert_eq!(full_mode(&file), 0o644);
}

/// A shared directory (sticky, as /tmp is) is refused without advice to change it, and keeps its mode and
/// sticky bit; a directory of the store's own inside it is the fix, and works.
#[tokio::test]
async fn a_sticky_shared_directory_is_refused_and_keeps_its_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = dir.path().join("tmp");
    std::fs::create_dir(&shared).expect("mkdir");
    let entry = shared.join("someone-elses");
    std::fs::create_dir(&entry).expect("mkdir");
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let message = refused(&shared).await;
    assert!(message.contains("has mode 1777"), "{message}");
    assert!(
        message.contains("it is shared, so do not change it"),
        "{message}"
    );
    assert!(!message.contains("chmod"), "{message}");
    let inside = shared.join("ballast-state");
    assert!(
        message.contains(&format!("--state file://{}", inside.display())),
        "{message}"
    );
    assert_eq!(full_mode(&shared), 0o1777);
    assert_eq!(full_mode(&entry), 0o755);

    // The advice works: the store creates its own directory, private.
    let url = format!("file://{}", inside.display());
    let store = StateStore::open(&url, StoreOptions::default())
        .await
        .expect("a root that does not exist yet opens");
    store
        .put(
            "c/x",
            b"x",
            &ballast_store::store::Precondition::MustNotExist,
        )
        .await
        .expect("first write");
    assert_eq!(full_mode(&inside), 0o700);
    assert_eq!(full_mode(&inside.join("c")), 0o700);
    assert_eq!(full_mode(&inside.join("c/x")), 0o600);
    assert_eq!(full_mode(&shared), 0o1777);
}

/// A root that is not a directory is refused, whatever it is, and not changed: a file, a device.
#[tokio::test]
async fn a_root_that_is_not_a_directory_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let message = refused(&file).await;
    assert!(
        message.contains(&format!(
            "state store path {} is a regular file, not a directory",
            file.display()
        )),
        "{message}"
    );
    assert_eq!(full_mode(&file), 0o644);
    assert_eq!(std::fs::read(&file).expect("read"), b"x");

    let null = Path::new("/dev/null");
    let before = full_mode(null);
    let message = refused(null).await;
    assert!(
        message.contains("/dev/null is a character device, not a directory"),
        "{message}"
    );
    assert_eq!(full_mode(null), before);
}

/// Under a private root, what the store did not create keeps its mode: the root already keeps others out.
#[tokio::test]
async fn what_lies_under_a_private_root_keeps_its_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    write(&root, "demo.example.com/cluster.yaml", CLUSTER);
    let cluster_dir = root.join("demo.example.com");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::set_permissions(&cluster_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    registry(&root)
        .await
        .load("demo.example.com")
        .await
        .expect("the cluster loads");
    assert_eq!(full_mode(&cluster_dir), 0o755);
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
    let fix = format!(
        "`chown {uid} {root} && chmod 0700 {root}`",
        uid = nix::unistd::geteuid(),
        root = root.display()
    );
    assert!(message.contains(&fix), "{fix:?} not in {message}");
}

/// The file store writes through the one durable writer under its lock: a replaced object is whole and private,
/// no temporary file is left beside it or listed, and a write whose expected version is stale changes nothing.
#[tokio::test]
async fn a_replaced_object_is_whole_private_and_leaves_no_temporary() {
    use ballast_store::store::{Precondition, StoreError};

    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("state");
    let store = StateStore::open(
        &format!("file://{}", root.display()),
        StoreOptions::default(),
    )
    .await
    .expect("open the store");
    let first = store
        .put("c/x", b"first", &Precondition::MustNotExist)
        .await
        .expect("create");
    let second = store
        .put(
            "c/x",
            b"second, longer",
            &Precondition::MustMatch(first.clone()),
        )
        .await
        .expect("replace");
    let stale = store
        .put("c/x", b"lost", &Precondition::MustMatch(first))
        .await
        .expect_err("a stale version");
    assert!(matches!(stale, StoreError::Conflict { .. }), "{stale}");

    let read = store.get("c/x").await.expect("read").expect("there");
    assert_eq!(read.data, b"second, longer");
    assert_eq!(read.version, second);
    assert_eq!(mode(&root.join("c/x")), 0o600);
    let beside: Vec<String> = std::fs::read_dir(root.join("c"))
        .expect("read the directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside, ["x"]);
    assert_eq!(store.list("c/").await.expect("list"), ["c/x"]);
}
