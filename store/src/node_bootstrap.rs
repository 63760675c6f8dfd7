//! Where workers find the node bootstrap service (`control-plane/node-bootstrap.json`, docs/node-identity.md):
//! the address of each control-plane node's service, kept by the control-plane nodes themselves. A worker reads
//! this one object instead of listing the cluster's control-plane instances in EC2: one small read from the
//! store instead of a DescribeInstances per worker (which counts against the account's EC2 throttle on AWS, and
//! is most of what a 100-worker scale-up costs the local cloud's emulator).
//!
//! Reading and publishing it: [`read_services`], [`publish_service`]. Its types and the merge a publisher makes
//! are `ballast_state::node_bootstrap`'s (pure).

use ballast_state::layout::ClusterPaths;
use ballast_state::limits::MAX_NODE_RECORD;
use ballast_state::node_bootstrap::{NodeBootstrapService, NodeBootstrapServices};

use crate::store::{Precondition, StateStore, StoreError};

/// How many times a control-plane node retries its conditional write when another one wrote first (five
/// control-plane nodes booting together conflict a few times at most).
const PUBLISH_ATTEMPTS: usize = 16;

/// What went wrong reading or publishing the services' addresses.
#[derive(Debug, thiserror::Error)]
pub enum NodeBootstrapError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{key} is not a list of node bootstrap services: {source}")]
    Corrupt {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{key}: other control-plane nodes kept writing it; gave up after {PUBLISH_ATTEMPTS} attempts")]
    Contended { key: String },
}

/// The published services (`None`: none published yet).
pub async fn read_services(
    store: &StateStore,
    paths: &ClusterPaths,
) -> Result<Option<NodeBootstrapServices>, NodeBootstrapError> {
    let key = paths.node_bootstrap_services();
    let Some(object) = store.get_bounded(&key, MAX_NODE_RECORD).await? else {
        return Ok(None);
    };
    let services = serde_json::from_slice(&object.data)
        .map_err(|source| NodeBootstrapError::Corrupt { key, source })?;
    Ok(Some(services))
}

/// What [`publish_service`] left in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub services: NodeBootstrapServices,
    /// Whether it wrote: `false` when the object already said exactly this (a control-plane node's periodic
    /// republish, in a cluster whose control plane did not change, costs one read and no write).
    pub written: bool,
}

/// Publishes this control-plane node's service and drops the entries of instances not in `live`, with a
/// conditional write (read, change, write only if unchanged; again on a conflict): control-plane nodes booting
/// together never lose each other's entries. An unreadable object is replaced, since its writers republish
/// nothing a worker cannot find through EC2. An object that already says what it would write is left alone.
pub async fn publish_service(
    store: &StateStore,
    paths: &ClusterPaths,
    own: &NodeBootstrapService,
    live: Option<&[String]>,
) -> Result<Published, NodeBootstrapError> {
    let key = paths.node_bootstrap_services();
    for _ in 0..PUBLISH_ATTEMPTS {
        let (current, precondition) = match store.get_bounded(&key, MAX_NODE_RECORD).await {
            Ok(None) => (None, Precondition::MustNotExist),
            Ok(Some(object)) => (
                serde_json::from_slice::<NodeBootstrapServices>(&object.data).ok(),
                Precondition::MustMatch(object.version),
            ),
            // Too large to be what a node wrote: replaced, as an unreadable one is.
            Err(StoreError::TooLarge { version, .. }) => (None, Precondition::MustMatch(version)),
            Err(e) => return Err(e.into()),
        };
        let next = current.clone().unwrap_or_default().published(own, live);
        if current.as_ref() == Some(&next) {
            return Ok(Published {
                services: next,
                written: false,
            });
        }
        // Serializing this plain struct cannot fail (string keys, no floats).
        let data = [
            serde_json::to_vec_pretty(&next).unwrap_or_default(),
            b"\n".to_vec(),
        ]
        .concat();
        match store.put(&key, &data, &precondition).await {
            Ok(_) => {
                return Ok(Published {
                    services: next,
                    written: true,
                })
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(NodeBootstrapError::Contended { key })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn service(id: &str, ip: &str) -> NodeBootstrapService {
        NodeBootstrapService {
            instance_id: id.to_string(),
            address: SocketAddr::new(ip.parse().expect("an IP"), 3988),
        }
    }

    fn ids(list: &NodeBootstrapServices) -> Vec<&str> {
        list.services
            .iter()
            .map(|s| s.instance_id.as_str())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_publishers_keep_each_others_entries() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = StateStore::File(crate::store::FileStore::new(dir.path().to_path_buf()));
        let paths = ClusterPaths::new("c1");
        let live: Vec<String> = (0..12).map(|i| format!("i-{i:02}")).collect();
        let publishes: Vec<_> = (0..12)
            .map(|i| {
                let (store, paths, live) = (store.clone(), paths.clone(), live.clone());
                tokio::spawn(async move {
                    let own = service(&format!("i-{i:02}"), &format!("10.0.0.{i}"));
                    publish_service(&store, &paths, &own, Some(&live)).await
                })
            })
            .collect();
        for publish in publishes {
            publish
                .await
                .expect("the publishing task")
                .expect("published");
        }
        let read = read_services(&store, &paths)
            .await
            .expect("read")
            .expect("published");
        assert_eq!(
            ids(&read),
            live.iter().map(String::as_str).collect::<Vec<_>>()
        );
        // A corrupt object is reported, naming the key.
        store
            .put(
                &paths.node_bootstrap_services(),
                b"not json",
                &Precondition::None,
            )
            .await
            .expect("written");
        let err = read_services(&store, &paths)
            .await
            .expect_err("an error")
            .to_string();
        assert!(
            err.contains("c1/control-plane/node-bootstrap.json"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn republishing_an_unchanged_list_writes_nothing_and_a_gone_instance_is_dropped() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = StateStore::File(crate::store::FileStore::new(dir.path().to_path_buf()));
        let paths = ClusterPaths::new("c1");
        // The file backend writes by renaming a new file into place: a write shows as a new inode (a version,
        // the content's sha256, would not tell a rewrite of the same list from no write).
        let file = dir.path().join(paths.node_bootstrap_services());
        let inode = || {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&file).expect("the published file").ino()
        };
        let (a, b) = (service("i-a", "10.0.0.1"), service("i-b", "10.0.0.2"));
        let both = ["i-a", "i-b"].map(String::from);
        let first = publish_service(&store, &paths, &a, Some(&both))
            .await
            .expect("published");
        assert!(first.written);
        let second = publish_service(&store, &paths, &b, Some(&both))
            .await
            .expect("published");
        assert!(second.written);
        assert_eq!(ids(&second.services), ["i-a", "i-b"]);
        let before = inode();

        // The periodic republish of a node whose cluster did not change: no write.
        let again = publish_service(&store, &paths, &a, Some(&both))
            .await
            .expect("published");
        assert_eq!((again.written, again.services), (false, second.services));
        assert_eq!(inode(), before, "rewritten");

        // i-b's instance is gone (a control-plane scale-down): i-a's next republish drops its entry.
        let shrunk = publish_service(&store, &paths, &a, Some(&["i-a".to_string()]))
            .await
            .expect("published");
        assert!(shrunk.written);
        assert_eq!(ids(&shrunk.services), ["i-a"]);
        assert_ne!(inode(), before, "not rewritten");
        let read = read_services(&store, &paths)
            .await
            .expect("read")
            .expect("published");
        assert_eq!(read, shrunk.services);
    }
}
