//! Where workers find the node bootstrap service (`control-plane/node-bootstrap.json`, docs/node-identity.md):
//! the address of each control-plane node's service, kept by the control-plane nodes themselves. A worker reads
//! this one object instead of listing the cluster's control-plane instances in EC2: one small read from the
//! store instead of a DescribeInstances per worker (which counts against the account's EC2 throttle on AWS, and
//! is most of what a 100-worker scale-up costs the local cloud's emulator).
//!
//! Trust: only the control-plane role may write the object (workers may read it). A stale or wrong address costs
//! a worker one failed connection, never a certificate from someone else: the worker trusts only the cluster's
//! CA, and it falls back to EC2 when no recorded service answers.
//!
//! Pure: [`NodeBootstrapServices::published`]. I/O: [`read_services`], [`publish_service`].

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::layout::ClusterPaths;
use crate::limits::MAX_NODE_RECORD;
use crate::store::{Precondition, StateStore, StoreError};

/// How many times a control-plane node retries its conditional write when another one wrote first (five
/// control-plane nodes booting together conflict a few times at most).
const PUBLISH_ATTEMPTS: usize = 16;

/// Every control-plane node's bootstrap service, as the control-plane nodes published them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeBootstrapServices {
    /// One per control-plane instance, sorted by instance id.
    pub services: Vec<NodeBootstrapService>,
}

/// One control-plane node's bootstrap service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeBootstrapService {
    pub instance_id: String,
    /// Its private IP and the service's port.
    pub address: SocketAddr,
}

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

impl NodeBootstrapServices {
    /// The list once `own` published its service: its own entry (new or moved), the other entries whose
    /// instance is still a live control-plane instance (`live`: ids from the caller's EC2 listing; `None`, no
    /// listing: every entry is kept), and no others. A replaced control-plane instance's entry goes when any
    /// control-plane node next boots.
    pub fn published(&self, own: &NodeBootstrapService, live: Option<&[String]>) -> Self {
        let mut services: Vec<NodeBootstrapService> = self
            .services
            .iter()
            .filter(|s| s.instance_id != own.instance_id)
            .filter(|s| live.is_none_or(|live| live.contains(&s.instance_id)))
            .cloned()
            .chain([own.clone()])
            .collect();
        services.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        NodeBootstrapServices { services }
    }

    /// The addresses to try, in order.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.services.iter().map(|s| s.address).collect()
    }
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

    #[test]
    fn publishing_adds_moves_and_drops_what_ec2_no_longer_lists() {
        let before = NodeBootstrapServices {
            services: vec![
                service("i-a", "10.0.0.1"),
                service("i-b", "10.0.0.2"),
                service("i-gone", "10.0.0.9"),
            ],
        };
        let live = ["i-a", "i-b", "i-c"].map(String::from);
        // A new node is added; the terminated one's entry goes; the sort is by instance id.
        let after = before.published(&service("i-c", "10.0.0.3"), Some(&live));
        assert_eq!(ids(&after), ["i-a", "i-b", "i-c"]);
        // A node that publishes again (rebooted, a new address) has one entry, the new one.
        let moved = after.published(&service("i-a", "10.0.0.7"), Some(&live));
        assert_eq!(ids(&moved), ["i-a", "i-b", "i-c"]);
        assert_eq!(moved.services[0].address.to_string(), "10.0.0.7:3988");
        // Its own entry stays even when its own listing missed it (EC2 is eventually consistent).
        let alone = moved.published(&service("i-d", "10.0.0.4"), Some(&["i-a".to_string()]));
        assert_eq!(ids(&alone), ["i-a", "i-d"]);
        assert_eq!(alone.addresses().len(), 2);
        // Without a listing, nothing is dropped.
        let unlisted = alone.published(&service("i-e", "10.0.0.5"), None);
        assert_eq!(ids(&unlisted), ["i-a", "i-d", "i-e"]);
    }

    #[test]
    fn the_object_is_camel_case_json_and_refuses_unknown_fields() {
        let list = NodeBootstrapServices {
            services: vec![service("i-a", "10.0.0.1")],
        };
        let text = serde_json::to_string(&list).expect("serializes");
        assert_eq!(
            text,
            r#"{"services":[{"instanceId":"i-a","address":"10.0.0.1:3988"}]}"#
        );
        assert!(serde_json::from_str::<NodeBootstrapServices>(r#"{"services":[],"x":1}"#).is_err());
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
