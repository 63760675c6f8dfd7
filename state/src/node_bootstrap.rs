//! Where workers find the node bootstrap service (`control-plane/node-bootstrap.json`, docs/node-identity.md):
//! the address of each control-plane node's service, kept by the control-plane nodes themselves. A worker reads
//! this one object instead of listing the cluster's control-plane instances in EC2.
//!
//! Trust: only the control-plane role may write the object (workers may read it). A stale or wrong address costs
//! a worker one failed connection, never a certificate from someone else: the worker trusts only the cluster's
//! CA, and it falls back to EC2 when no recorded service answers.
//!
//! The object's types and the merge a publisher makes ([`NodeBootstrapServices::published`]); reading and
//! publishing it in the store is `ballast_store::node_bootstrap`'s.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

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
}
